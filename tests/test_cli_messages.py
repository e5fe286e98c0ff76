"""One-line errors that say where to look: a trace directory whose tables are
elsewhere names the folder it looked in (and the folders near it that hold tables),
and a file ``specan import auto`` cannot place says what it resembles."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analyzer.cli import main
from analyzer.ingest.importers import SOURCES
from tracebuilder import deployment, request, round_row, step, write_table, write_traces


def one_line_exit_2(result) -> str:
    assert result.exit_code == 2, result.output
    assert result.exc_info[0] is SystemExit and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def traces(folder: Path) -> Path:
    return write_traces(folder, deployments=[deployment("a")], requests=[request("a", "r1")],
                        steps=[step("a", 0)], rounds=[round_row("a", "r1", 0, 4, 2, step_id=0)])


# --- a trace directory whose tables are not there ------------------------------------------

def test_report_of_the_parent_folder_names_it_and_the_subfolder_with_tables(tmp_path):
    traces(tmp_path / "x")
    (tmp_path / "notes").mkdir()                    # a subfolder without tables is not suggested
    line = one_line_exit_2(CliRunner().invoke(main, ["report", str(tmp_path)]))
    assert line == (f"Error: {tmp_path}: table deployments: required table is missing: expected "
                    f"deployments.parquet or deployments/**/*.parquet; did you mean {tmp_path / 'x'}? "
                    "(it holds trace tables)")


def test_several_subfolders_with_tables_are_all_named(tmp_path):
    for name in ("day1", "day2"):
        traces(tmp_path / name)
    line = one_line_exit_2(CliRunner().invoke(main, ["report", str(tmp_path)]))
    assert line.endswith(f"did you mean {tmp_path / 'day1'} or {tmp_path / 'day2'}? (they hold trace tables)")


def test_a_folder_without_tables_anywhere_near_is_named_alone(tmp_path):
    (tmp_path / "empty").mkdir()
    line = one_line_exit_2(CliRunner().invoke(main, ["report", str(tmp_path / "empty")]))
    assert line == (f"Error: {tmp_path / 'empty'}: table deployments: required table is missing: expected "
                    "deployments.parquet or deployments/**/*.parquet")


def test_a_table_folder_given_as_traces_points_at_its_trace_directory(tmp_path):
    root = write_traces(tmp_path / "t", deployments=[deployment("a")], requests=[request("a", "r1")],
                        steps=[step("a", 0)])
    write_table(root, "rounds", {"date=2026-11-27": [round_row("a", "r1", 0, 4, 2, step_id=0)]})
    line = one_line_exit_2(CliRunner().invoke(main, ["report", str(root / "rounds")]))
    assert line.startswith(f"Error: {root / 'rounds'}: table deployments: required table is missing")
    assert line.endswith(f"; did you mean {root}? ({root / 'rounds'} is its rounds table)")


def test_a_missing_table_beside_others_names_the_folder_without_a_guess(tmp_path):
    root = write_traces(tmp_path / "t", deployments=[deployment("a")])
    traces(root / "old")                            # tables present here: the folder is the right one
    line = one_line_exit_2(CliRunner().invoke(main, ["validate", str(root)]))
    assert line.startswith(f"Error: {root}: table rounds: required table is missing")
    assert "did you mean" not in line


def test_nightly_of_the_parent_folder_points_at_the_subfolder(tmp_path):
    traces(tmp_path / "x")
    line = one_line_exit_2(CliRunner().invoke(main, ["nightly", str(tmp_path), "--date", "2026-11-27",
                                                     "--out", str(tmp_path / "out")]))
    assert line.endswith(f"did you mean {tmp_path / 'x'}? (it holds trace tables)")


# --- a file no importer fits ---------------------------------------------------------------

def auto(tmp_path: Path, path: Path) -> str:
    line = one_line_exit_2(CliRunner().invoke(main, ["import", "auto", str(path), "--deployment", "x",
                                                     "--out", str(tmp_path / "t")]))
    assert line.startswith(f"Error: {path}: no source fits its content; name one: specan import SOURCE (")
    assert line.endswith(f"; SOURCE is one of {', '.join(SOURCES)})")
    assert not (tmp_path / "t").exists()
    return line


@pytest.mark.parametrize("name, content, seen", [
    ("notes.txt", "nothing an engine printed\nsecond line\n", "its first line is 'nothing an engine printed'"),
    ("empty.log", "", "it is empty"),
    ("responses.jsonl", '{"id": "c1", "text": "hi", "usage": {"prompt_tokens": 3}}\n{"id": "c2"}\n',
     "it is JSON whose first object has the keys id, text, usage"),
    ("pretty.json", '{\n  "id": "c1",\n  "usage": {\n    "prompt_tokens": 3\n', "it is JSON whose first object "
     "has the keys id, usage, prompt_tokens"),
    ("array.json", '[{"k": 1, "j": 2}, {"k": 3}]', "it is JSON whose first object has the keys k, j"),
])
def test_auto_says_what_a_file_no_source_fits_looks_like(tmp_path, name, content, seen):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    assert f"({seen};" in auto(tmp_path, path)


def test_a_long_first_line_is_cut(tmp_path):
    path = tmp_path / "wide.txt"
    path.write_text("x" * 200 + "\n")
    assert f"its first line is '{'x' * 80}...'" in auto(tmp_path, path)


def test_a_compressed_file_is_named_as_such(tmp_path):
    path = tmp_path / "vllm.log.gz"
    path.write_bytes(gzip.compress(b"INFO SpecDecoding metrics: ...\n"))
    assert "(it is gzip-compressed: decompress it first;" in auto(tmp_path, path)


def test_a_parquet_file_is_a_trace_table_not_an_import(tmp_path):
    path = tmp_path / "rounds.parquet"
    pq.write_table(pa.table({"deployment_id": ["a"], "request_id": ["r1"]}), path)
    line = auto(tmp_path, path)
    assert ("(it is a Parquet file (columns deployment_id, request_id): trace tables are read where they are "
            "(specan report TRACES), not imported;") in line
