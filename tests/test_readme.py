"""The README's generated parts are current, and its commands are the ones CI runs."""

import re
from pathlib import Path

from analyzer.ingest.schema import format_table_markdown

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def between(text: str, marker: str) -> str:
    match = re.search(rf"<!-- {marker}:start -->\n(.*?)<!-- {marker}:end -->", text, re.S)
    assert match, f"README lacks the {marker} markers"
    return match.group(1)


def test_trace_format_table_is_generated_from_schemas():
    # To refresh: specan schema, and paste between the trace-format markers.
    assert between(README, "trace-format") == format_table_markdown()


def test_ci_runs_exactly_the_readme_test_command():
    ci_lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line and not line.startswith("#") and not line.startswith(("set ", "cd ", "command -v chromium"))]
    assert len(ci_lines) == 1
    test_command = ci_lines[0]
    blocks = re.findall(r"```(?:sh|bash)?\n(.*?)```", README, re.S)
    assert blocks[1].strip() == test_command, "the README's second command must be the CI test command"
    assert "sample_traces/" in blocks[0] and "pip install ." in blocks[0]
