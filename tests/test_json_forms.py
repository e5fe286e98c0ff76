"""Every importer that reads JSON reads it in every form a user saves it in (common.json_values):
one object per line, one object per file, an array per file, pretty-printed, documents back to back.

Each form is the same records as a fixture whose JSONL import other tests check by hand; here the
import of each re-saved form must write exactly the rows of the JSONL import.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer.ingest.importers.common import MalformedInput, json_values
from imported import rows, run

FIXTURES = Path(__file__).parent / "fixtures"

# (source, JSONL fixture, the tables it fills)
SOURCES = [
    ("vllm-responses", FIXTURES / "vllm_responses.jsonl", ("requests", "rounds")),
    ("sglang-responses", FIXTURES / "sglang_responses.jsonl", ("requests", "rounds")),
    ("trtllm-responses", FIXTURES / "trtllm" / "responses.jsonl", ("requests", "rounds")),
    ("aiperf-records", FIXTURES / "aiperf" / "profile_export.jsonl", ("requests", "rounds")),
]


def records(path: Path) -> list:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def forms(values: list) -> dict[str, str]:
    """The same records as a user may have saved them."""
    return {
        "array, pretty-printed (jq -s .)": json.dumps(values, indent=2) + "\n",
        "array on one line": json.dumps(values),
        "documents back to back, pretty-printed (jq .)": "".join(json.dumps(v, indent=2) + "\n" for v in values),
        "documents back to back, no newline between": "".join(json.dumps(v) for v in values),
    }


def imported(source: str, path: Path, out: Path, tables) -> dict[str, list]:
    result = run("import", source, path, "--deployment", "d", "--out", out)
    assert result.exit_code == 0, result.output
    return {table: sorted(rows(out, table), key=lambda r: json.dumps(r, sort_keys=True, default=str))
            for table in tables}


@pytest.mark.parametrize("source, fixture, tables", SOURCES, ids=[s[0] for s in SOURCES])
def test_every_form_imports_the_rows_of_the_jsonl(tmp_path, source, fixture, tables):
    expected = imported(source, fixture, tmp_path / "jsonl", tables)
    assert all(expected[table] for table in tables)           # the fixture fills them: the comparison bites
    for i, (form, text) in enumerate(forms(records(fixture)).items()):
        path = tmp_path / f"form{i}.json"
        path.write_text(text, encoding="utf-8")
        assert imported(source, path, tmp_path / f"out{i}", tables) == expected, form


@pytest.mark.parametrize("source, fixture, tables", SOURCES, ids=[s[0] for s in SOURCES])
def test_one_pretty_printed_object_per_file(tmp_path, source, fixture, tables):
    values = records(fixture)
    # every record a file of its own, pretty-printed
    paths = []
    for i, value in enumerate(values):
        paths.append(tmp_path / f"record{i}.json")
        paths[-1].write_text(json.dumps(value, indent=4) + "\n", encoding="utf-8")
    whole = imported(source, fixture, tmp_path / "jsonl", tables)
    result = run("import", source, *paths, "--deployment", "d", "--out", tmp_path / "files")
    assert result.exit_code == 0, result.output
    got = {table: sorted(rows(tmp_path / "files", table), key=lambda r: json.dumps(r, sort_keys=True, default=str))
           for table in tables}
    assert got == whole


def test_line_numbers_of_each_form(tmp_path):
    path = tmp_path / "x.json"
    # JSONL: each value on its line
    assert [line for line, _ in json_values('{"a": 1}\n\n{"a": 2}\n', path)] == [1, 3]
    # pretty-printed documents: each starts on the line of its brace
    text = '{\n  "a": 1\n}\n{\n  "a": 2\n}\n'
    assert list(json_values(text, path)) == [(1, {"a": 1}), (4, {"a": 2})]
    # an array: its elements, each on the line it starts on; an empty array gives nothing
    text = '[\n  {"a": 1},\n  {\n    "a": 2\n  }\n]\n[]\n'
    assert list(json_values(text, path)) == [(2, {"a": 1}), (3, {"a": 2})]
    # a UTF-8 byte-order mark before the first value
    assert list(json_values('\ufeff{"a": 1}', path)) == [(1, {"a": 1})]


def test_broken_json_names_the_line_where_it_stops(tmp_path):
    path = tmp_path / "x.json"
    # a JSONL line cut off at the end of the file: that line
    with pytest.raises(MalformedInput, match=r"x.json:3: not valid JSON \(Expecting value on the file's last line"):
        list(json_values('{"a": 1}\n{"a": 2}\n{"a": \n', path))
    # a pretty-printed object cut off: the line it starts on
    with pytest.raises(MalformedInput, match=r"x.json:4: not valid JSON .*the value starting here is cut off"):
        list(json_values('{"a": 0}\n\n\n{\n  "a": 1,\n  "b": tru', path))
    # a broken line inside the file: the line and column where parsing stopped
    with pytest.raises(MalformedInput, match=r"x.json:2: not valid JSON \(Expecting ',' delimiter, column 9\)"):
        list(json_values('{"a": 1}\n{"a": 2 "b": 3}\n{"a": 4}\n', path))
    # an array never closed
    with pytest.raises(MalformedInput, match=r"x.json:2: not valid JSON \(an array not closed"):
        list(json_values('[{"a": 1},\n {"a": 2}', path))


def test_a_truncated_pretty_printed_file_is_exit_2_naming_file_and_line(tmp_path):
    values = records(FIXTURES / "sglang_responses.jsonl")
    text = json.dumps(values, indent=2)
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2], encoding="utf-8")
    result = run("import", "sglang-responses", cut, "--deployment", "d", "--out", tmp_path / "t")
    assert result.exit_code == 2, result.output
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert "cut.json:" in result.stderr and "not valid JSON" in result.stderr
