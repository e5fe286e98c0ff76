"""Fixtures shared by the test modules.

The sample traces' report is built once per pytest run and every format is
rendered from that one document, the same way `specan report` does it
(api.open_traces → api.report_document → api.render_report)."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from analyzer import api
from analyzer.analysis.config import load_config

# pytest-xdist runs one worker per core; a DuckDB thread per worker keeps them from
# contending (SPECAN_THREADS, docs/commands.md). Results do not depend on it: every
# sum is exact or ordered, and the concurrency tests run their own processes.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("SPECAN_THREADS", "1")

# The groups of tests that run on one xdist worker each (--dist loadgroup), collected first.
# pytest-xdist 3.8 already hands out the scopes with the most tests first; collecting the
# long groups first keeps that order where counts would not (a group of few, long tests,
# such as the llama.cpp end-to-end run), so they start beside the other tests, not at the end.
LONG_GROUPS = ("spark", "spark-cluster", "llamacpp_e2e", "vllm_e2e")


def pytest_collection_modifyitems(config, items):
    def group(item) -> int:
        marker = item.get_closest_marker("xdist_group")
        name = (marker.args[0] if marker.args else marker.kwargs.get("name")) if marker else None
        return LONG_GROUPS.index(name) if name in LONG_GROUPS else len(LONG_GROUPS)

    items.sort(key=group)       # stable: the order within a group, and of the rest, is kept


# The user's cache home as the run found it, before private_cache_home below moves it for
# every test: the llama.cpp end-to-end build is cached there (e2e/llamacpp/build.sh).
USER_CACHE_HOME = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces"


@pytest.fixture(autouse=True)
def private_cache_home(tmp_path_factory, monkeypatch):
    """Every test's commands keep their cache of the passes in a folder of their own,
    never in the user's ~/.cache/specan (the CLI's default): a test starts with none."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


@pytest.fixture(scope="session")
def sample_report() -> dict:
    """{"doc": the report document, "md" | "json" | "html": its renderings}."""
    ws = api.open_traces(SAMPLE)
    try:
        doc = api.report_document(ws, config=load_config(None))
    finally:
        ws.close()
    rendered = {fmt: api.render_report(copy.deepcopy(doc), fmt) for fmt in ("md", "json", "html")}
    return {"doc": doc, **rendered}
