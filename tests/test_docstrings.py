"""The examples in the package's docstrings run, from the repository root (where
``sample_traces/`` is), and print what they show."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import analyzer

# the package as installed (site-packages under CI's wheel install, the checkout when editable)
PACKAGE = Path(analyzer.__file__).resolve().parent
# the examples run where a user runs them: the repository root, where sample_traces/ is
ROOT = Path(__file__).resolve().parent.parent


def modules_with_examples() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>>" in path.read_text(encoding="utf-8"):
            parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_the_examples_are_found():
    # the three modules whose docstrings a newcomer reads first
    assert {"analyzer.api", "analyzer.decide.gates", "analyzer.analysis.config"} <= set(modules_with_examples())


@pytest.mark.parametrize("name", modules_with_examples())
def test_docstring_examples_run(name, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in doctest.DocTestFinder().find(module) if t.examples]
    assert tests, f"{name}: '>>>' in the file, but no example that doctest finds"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, capsys.readouterr().out
