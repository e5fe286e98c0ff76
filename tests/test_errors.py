"""One error boundary (docs/commands.md, exit statuses): 0 done, 1 a finding,
2 bad usage or input, 3 the environment or specan itself. Every error is one
line on stderr; `specan --debug` adds the traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.cli import main
from tracebuilder import deployment, request, round_row, step, write_traces

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def tiny(tmp_path):
    """An unpartitioned trace: one deployment, one request, two rounds."""
    return write_traces(tmp_path / "tiny", deployments=[deployment("a")], requests=[request("a", "r1")],
                        steps=[step("a", 1), step("a", 2)],
                        rounds=[round_row("a", "r1", 0, 3, 2, step_id=1), round_row("a", "r1", 1, 3, 1, step_id=2)])


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


# ----------------------------------------------------------------- exit 3: outputs that cannot be written


def test_report_to_a_missing_folder_exits_3(tiny):
    result = run("report", tiny, "-o", "/nonexistent/x.md")
    assert result.exit_code == 3
    assert one_line(result) == "Error: cannot write /nonexistent/x.md: the folder /nonexistent does not exist"


def test_load_into_a_missing_folder_exits_3(tiny):
    result = run("load", tiny, "--db", "/nonexistent/x.duckdb")
    assert result.exit_code == 3
    assert one_line(result) == "Error: cannot write /nonexistent/x.duckdb: the folder /nonexistent does not exist"


def test_nightly_out_that_cannot_be_created_exits_3_before_the_analysis(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    # the traces do not exist: had the analysis run first, this would be exit 2 for them
    result = run("nightly", tmp_path / "no-traces", "--date", "2026-11-28", "--out", blocker / "specan")
    assert result.exit_code == 3
    assert one_line(result) == (f"Error: cannot write {blocker / 'specan' / '2026-11-28' / 'report.md'}: "
                                f"{blocker} is not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


# A folder where a file is to be written is refused as input (exit 2, issue 37): it is not a
# regular file, a FIFO, a character device or a socket.


def test_nightly_day_report_that_is_a_folder_exits_2_before_the_analysis(tmp_path):
    (tmp_path / "out" / "2026-11-28" / "report.json").mkdir(parents=True)
    result = run("nightly", tmp_path / "no-traces", "--date", "2026-11-28", "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert one_line(result) == f"Error: cannot write {tmp_path / 'out' / '2026-11-28' / 'report.json'}: it is a folder"
    # nothing was written: no lock, no history, no other report
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["2026-11-28"]
    assert sorted(p.name for p in (tmp_path / "out" / "2026-11-28").iterdir()) == ["report.json"]


def test_nightly_history_that_is_a_folder_exits_2_before_the_analysis(tmp_path):
    (tmp_path / "out" / "history.parquet").mkdir(parents=True)
    result = run("nightly", tmp_path / "no-traces", "--date", "2026-11-28", "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert one_line(result) == f"Error: cannot write {tmp_path / 'out' / 'history.parquet'}: it is a folder"


def test_load_db_that_cannot_be_written_fails_before_the_analysis(tmp_path):
    result = run("load", tmp_path / "no-traces", "--db", tmp_path / "missing" / "x.duckdb")
    assert result.exit_code == 3
    assert one_line(result) == (f"Error: cannot write {tmp_path / 'missing' / 'x.duckdb'}: the folder "
                                f"{tmp_path / 'missing'} does not exist")
    result = run("load", tmp_path / "no-traces", "--db", tmp_path)
    assert result.exit_code == 2
    assert one_line(result) == f"Error: cannot write {tmp_path}: it is a folder"


# ----------------------------------------------------------------- exit 3: memory, bugs; --debug


def test_out_of_memory_is_not_blamed_on_a_file(tiny, monkeypatch):
    def out_of_memory(*_a, **_k):
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block of size 256.0 KiB")

    monkeypatch.setattr(api, "load_traces", out_of_memory)
    result = run("report", tiny, "--memory-limit", "64MB")
    assert result.exit_code == 3
    line = one_line(result)
    assert line.startswith("Error: out of memory: the work did not fit in --memory-limit")
    assert ".parquet" not in line and "not readable" not in line


def test_a_bug_exits_3_and_debug_prints_the_traceback(tiny, monkeypatch):
    def broken(*_a, **_k):
        raise KeyError("speedup")

    monkeypatch.setattr(api, "report_document", broken)
    result = run("report", tiny)
    assert result.exit_code == 3
    assert one_line(result) == ("Error: internal error (KeyError: 'speedup'); run `specan --debug ...` "
                                "for the traceback and report it")
    debug = run("--debug", "report", tiny)
    assert debug.exit_code == 3
    assert debug.stderr.startswith("Traceback (most recent call last):")
    assert debug.stderr.rstrip().endswith("Error: internal error (KeyError: 'speedup'); run `specan --debug ...` "
                                          "for the traceback and report it")


def test_a_gate_failure_stays_exit_1_and_is_not_an_error(tiny, tmp_path):
    strict = run("validate", tiny, "--strict")
    assert strict.exit_code == 0
    # the tiny trace with its one request not matching the reference: a match rate of 0 of 1,
    # below 1.0, fails the correctness gate, so a is not shipped. `--check` exits 1 on it: a
    # finding, not an error, so stderr holds its one line "deployment: action: reason" (the
    # verdict's reason, after "Don't ship a: "), with no "Error:" and no traceback
    failing = write_traces(tmp_path / "failing", deployments=[deployment("a")],
                           requests=[request("a", "r1", matches_reference=False)],
                           steps=[step("a", 1), step("a", 2)],
                           rounds=[round_row("a", "r1", 0, 3, 2, step_id=1), round_row("a", "r1", 1, 3, 1, step_id=2)])
    result = run("report", failing, "--check")
    assert result.exit_code == 1
    assert result.stderr == "a: dont_ship: match rate 0.0% < 100.0%.\n"


# ----------------------------------------------------------------- exit 2: usage and input


@pytest.mark.parametrize("query", ["", "   "])
def test_an_empty_query_is_a_usage_error(tiny, tmp_path, query):
    on_traces = run("sql", tiny, query)
    assert on_traces.exit_code == 2
    assert on_traces.stderr.splitlines()[-1] == ('Error: QUERY is empty: give one SQL statement, '
                                                 'e.g. "select * from accept_length"')
    db = tmp_path / "t.duckdb"
    assert run("load", tiny, "--db", db).exit_code == 0
    on_db = run("sql", "--db", db, query)
    assert on_db.exit_code == 2 and "AttributeError" not in on_db.stderr


def test_a_bad_query_is_input(tiny):
    result = run("sql", tiny, "select * from no_such_view")
    assert result.exit_code == 2
    assert one_line(result) == "Error: query failed: Catalog Error: Table with name no_such_view does not exist!"


def test_a_bad_memory_limit_exits_2_and_leaves_nothing_behind(tiny, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    result = run("report", tiny, "--memory-limit", "lots", "--temp-dir", scratch)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == ("Error: Invalid value for --memory-limit: 'lots' is not a memory "
                                              "size: expected e.g. 4GB, 512MB or 80%")
    assert list(scratch.iterdir()) == []
    assert api.check_memory_limit(" 512 mb ") == "512MB"
    assert api.check_memory_limit("80%") == "80%"
    for bad in ("4GB'; drop table rounds; --", "0GB", "150%", "-1GB", "GB"):
        with pytest.raises(ValueError):
            api.check_memory_limit(bad)


def test_a_missing_directory_says_so_plainly():
    result = run("validate", "/nonexistent")
    assert result.exit_code == 2
    assert one_line(result) == "Error: /nonexistent: no such directory"


def test_a_file_instead_of_a_directory_says_so(tmp_path):
    path = tmp_path / "rounds.csv"
    path.write_text("x\n")
    result = run("validate", path)
    assert result.exit_code == 2
    assert one_line(result) == (f"Error: {path}: not a directory; expected a trace directory holding "
                                "deployments/, requests/, steps/, rounds/, intervals/ (or <table>.parquet files)")


def test_nightly_date_without_date_partitions_is_refused(tiny, tmp_path):
    result = run("nightly", tiny, "--date", "2020-01-01", "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert one_line(result) == (f"Error: {tiny}: no table is partitioned by date= (folders such as "
                                "rounds/date=2020-01-01/), so --date 2020-01-01 cannot select a day")
    assert not (tmp_path / "out").exists()


def test_a_misspelled_table_folder_gets_a_note(tiny):
    (tiny / "step").mkdir()
    (tiny / "steps.parquet").rename(tiny / "step" / "part-0.parquet")
    result = run("validate", tiny)
    assert result.exit_code == 0
    assert f"note: step/ in {tiny} is not a trace table and was not read; did you mean steps/?" in result.stdout
    assert "steps        " in result.stdout and "(absent: optional table)" in result.stdout
    report = run("report", tiny, "--format", "json")
    assert f"step/ in {tiny} is not a trace table and was not read; did you mean steps/?" in report.stdout


# ----------------------------------------------------------------- private scratch folders


def test_each_run_has_its_own_scratch_folder_removed_at_exit(tiny, tmp_path):
    scratch = tmp_path / "scratch"
    # (the sample's report, byte for byte run to run: test_report.test_the_command_prints_the_same_report)
    runs = [subprocess.Popen([sys.executable, "-m", "analyzer", "report", str(tiny), "--format", "json",
                              "--temp-dir", str(scratch)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(2)]
    outputs = [r.communicate() for r in runs]
    assert [r.returncode for r in runs] == [0, 0], [err.decode()[-500:] for _, err in outputs]
    assert outputs[0][0] == outputs[1][0]       # two concurrent reports, the same document
    assert list(scratch.iterdir()) == []


def test_the_scratch_folder_is_removed_on_error(tmp_path):
    scratch = tmp_path / "scratch"
    bad = tmp_path / "bad"
    (bad / "rounds").mkdir(parents=True)
    (bad / "rounds" / "part.parquet").write_text("not parquet")
    result = run("report", bad, "--temp-dir", scratch)
    assert result.exit_code == 2
    assert list(scratch.iterdir()) == []


# ----------------------------------------------------------------- 64-bit link keys


def two_requests(tmp_path):
    return write_traces(tmp_path / "two", deployments=[deployment("a")],
                        requests=[request("a", "r1"), request("a", "r2")], steps=[step("a", 1), step("a", 2)],
                        rounds=[round_row("a", "r1", 0, 3, 2, step_id=1), round_row("a", "r2", 0, 3, 1, step_id=2)])


def test_a_collision_among_parents_is_an_internal_error(tmp_path):
    from analyzer.errors import InternalError
    from analyzer.ingest.load import check_link_keys

    ws = api.open_traces(two_requests(tmp_path))
    try:
        check_link_keys(ws.con, ws.summary.found)         # distinct keys, distinct uids: fine
        ws.con.execute("update requests set request_uid = (select request_uid from requests where request_id = 'r1')")
        with pytest.raises(InternalError, match=r"^hash collision: request_uid -?\d+ stands for two different "
                                                r"requests keys \(deployment_id a, request_id r1; deployment_id a, request_id r2\)"):
            check_link_keys(ws.con, ws.summary.found)
    finally:
        ws.close()


def test_a_collision_among_rounds_is_an_internal_error(tmp_path):
    from analyzer.analysis.views import ROUND_AGGREGATES, create_views
    from analyzer.errors import InternalError
    from analyzer.ingest.load import check_link_keys

    ws = api.open_traces(two_requests(tmp_path))
    try:
        # two rounds of different requests whose step ids hash alike: step_rounds sees both ids under one uid
        ws.con.execute("create table forced as select * replace (42 as step_uid) from rounds")
        ws.con.execute("create or replace view rounds as select * from forced")
        ws.con.execute("delete from steps")
        create_views(ws.con, temporary=True)
        assert ws.con.execute("select step_uid_collides from step_rounds").fetchall() == [(True,)]
        with pytest.raises(InternalError, match=r"^hash collision: step_uid 42 stands for two different steps keys \(rounds of "
                                                r"step_id \d+ of deployment_id \w+ and of another\)"):
            check_link_keys(ws.con, ws.summary.found, ROUND_AGGREGATES)
    finally:
        ws.close()
