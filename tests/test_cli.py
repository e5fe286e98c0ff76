"""The command line (docs/commands.md): whole outputs of validate, load and sql, and exit codes.

Every expected output below is written out in full, so any change to what a
user or a script sees shows up here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from analyzer.cli import main
from tracebuilder import at, deployment, round_row, write_traces, request, step

# --------------------------------------------------------------------------- dataset






@pytest.fixture
def traces(tmp_path):
    """One deployment with four rejected rows, one per table but deployments:

    - requests r2: finish before arrival            -> time_order
    - steps 2: negative duration                    -> negative_duration
    - rounds r1/2: 4 accepted of 3 drafted          -> accepted_exceeds_drafted
    - rounds r9/0: no request r9                    -> unknown_request
    """
    return write_traces(
        tmp_path / "traces",
        deployments=[deployment("a")],
        requests=[request("a", "r1", category="chat, long", temperature=0.7, prompt_tokens=12),
                  request("a", "r2", finish_time=at(-1)),
                  request("a", "r3", category=None, temperature=None, prompt_tokens=8)],
        steps=[step("a", 1), step("a", 2, duration_ms=-1.0)],
        rounds=[round_row("a", "r1", 0, 3, 2, step_id=1),
                round_row("a", "r1", 1, 3, 3, step_id=1),
                round_row("a", "r1", 2, 3, 4),
                round_row("a", "r9", 0, 3, 1)],
    )


@pytest.fixture
def clean_traces(tmp_path):
    """No rejected rows; two identical deployments copies; requests and steps absent."""
    return write_traces(tmp_path / "clean", deployments=[deployment("a"), deployment("a")],
                        rounds=[round_row("a", "r1", 0, 3, 2)])


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


SUMMARY = """\
table              read      clean  rejected
deployments           1          1         0
requests              3          2         1
steps                 2          1         1
rounds                4          2         2
intervals             -          -         -  (absent: optional table)

rejected rows: 4
"""

VALIDATE = SUMMARY + """\
  requests     time_order                          1
      e.g. deployment_id=a, request_id=r2
  steps        negative_duration                   1
      e.g. deployment_id=a, step_id=2
  rounds       accepted_exceeds_drafted            1
      e.g. deployment_id=a, request_id=r1, round_idx=2
  rounds       unknown_request                     1
      e.g. deployment_id=a, request_id=r9, round_idx=0
"""

CLEAN_VALIDATE = """\
table              read      clean  rejected
deployments           2          1         0  (1 identical copies merged)
requests              -          -         -  (absent: optional table)
steps                 -          -         -  (absent: optional table)
rounds                1          1         0
intervals             -          -         -  (absent: optional table)

rejected rows: 0
"""


# --------------------------------------------------------------------------- validate


def test_validate_prints_counts_reasons_and_examples(traces):
    result = run("validate", traces)
    assert result.exit_code == 0, result.output
    assert result.stdout == VALIDATE
    assert result.stderr == ""      # no progress lines unless asked for


def test_validate_with_merged_copies_and_absent_tables(clean_traces):
    result = run("validate", clean_traces)
    assert result.exit_code == 0, result.output
    assert result.stdout == CLEAN_VALIDATE


def test_validate_shows_at_most_three_examples_per_reason(tmp_path):
    root = write_traces(tmp_path, deployments=[deployment("a")], requests=[request("a", "r1")],
                        rounds=[round_row("a", f"r{i}", 0, 2, 1) for i in (1, 6, 5, 9, 7)])
    result = run("validate", root)
    assert result.exit_code == 0, result.output
    # The first three keys in sorted order: r5, r6, r7 (not r9).
    assert result.stdout == """\
table              read      clean  rejected
deployments           1          1         0
requests              1          1         0
steps                 -          -         -  (absent: optional table)
rounds                5          1         4
intervals             -          -         -  (absent: optional table)

rejected rows: 4
  rounds       unknown_request                     4
      e.g. deployment_id=a, request_id=r5, round_idx=0
      e.g. deployment_id=a, request_id=r6, round_idx=0
      e.g. deployment_id=a, request_id=r7, round_idx=0
"""


def test_validate_strict_exits_1_with_rejected_rows(traces):
    result = run("validate", traces, "--strict")
    assert result.exit_code == 1
    assert result.stdout == VALIDATE     # the same report, then the failing status


def test_validate_strict_exits_0_without_rejected_rows(clean_traces):
    result = run("validate", clean_traces, "--strict")
    assert result.exit_code == 0, result.output
    assert result.stdout == CLEAN_VALIDATE


def test_validate_missing_directory_is_exit_2(tmp_path):
    result = run("validate", tmp_path / "nope")
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1
    assert str(tmp_path / "nope") in result.stderr
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------- sql


REQUESTS_QUERY = "select request_id, prompt_tokens, temperature, category from requests order by request_id"


def test_sql_table_format(traces):
    result = run("sql", traces, REQUESTS_QUERY)
    assert result.exit_code == 0, result.output
    # Numbers right-aligned, text left-aligned, NULL for a missing value,
    # r2 absent (rejected), r3's category defaulted; no trailing blanks.
    assert result.stdout == """\
request_id  prompt_tokens  temperature  category
----------  -------------  -----------  ----------
r1                     12          0.7  chat, long
r3                      8         NULL  unlabeled
"""


def test_sql_table_is_the_default_format(traces):
    assert run("sql", traces, REQUESTS_QUERY).stdout == run("sql", traces, REQUESTS_QUERY,
                                                              "--format", "table").stdout


def test_sql_csv_format(traces):
    result = run("sql", traces, REQUESTS_QUERY, "--format", "csv")
    assert result.exit_code == 0, result.output
    # A comma inside a value is quoted; NULL is an empty field.
    assert result.stdout == """\
request_id,prompt_tokens,temperature,category
r1,12,0.7,"chat, long"
r3,8,,unlabeled
"""


def test_sql_json_format(traces):
    result = run("sql", traces,
                 "select request_id, prompt_tokens, temperature, category, arrival_time "
                 "from requests order by request_id", "--format", "json")
    assert result.exit_code == 0, result.output
    # One JSON array, one object per row; times as ISO 8601 (UTC, as read).
    assert result.stdout == (
        '[{"request_id": "r1", "prompt_tokens": 12, "temperature": 0.7, "category": "chat, long", '
        '"arrival_time": "2026-11-28T12:00:00"}, '
        '{"request_id": "r3", "prompt_tokens": 8, "temperature": null, "category": "unlabeled", '
        '"arrival_time": "2026-11-28T12:00:00"}]\n')
    assert json.loads(result.stdout)[1]["temperature"] is None


def test_sql_json_of_no_rows_is_an_empty_array(traces):
    result = run("sql", traces, "select * from rounds where false", "--format", "json")
    assert result.exit_code == 0, result.output
    assert result.stdout == "[]\n"


def test_sql_sees_rejected_rows(traces):
    result = run("sql", traces, "select table_name, row_key, reason from rejected_rows order by all",
                 "--format", "csv")
    assert result.exit_code == 0, result.output
    assert result.stdout == """\
table_name,row_key,reason
requests,"deployment_id=a, request_id=r2",time_order
rounds,"deployment_id=a, request_id=r1, round_idx=2",accepted_exceeds_drafted
rounds,"deployment_id=a, request_id=r9, round_idx=0",unknown_request
steps,"deployment_id=a, step_id=2",negative_duration
"""


def test_load_then_sql_on_the_database(traces, tmp_path):
    db = tmp_path / "out.duckdb"
    result = run("load", traces, "--db", db)
    assert result.exit_code == 0, result.output
    # load prints the counts without examples, then the file it wrote.
    assert result.stdout == SUMMARY + """\
  requests     time_order                          1
  steps        negative_duration                   1
  rounds       accepted_exceeds_drafted            1
  rounds       unknown_request                     1
""" + f"wrote {db}\n"
    assert db.is_file()

    result = run("sql", "--db", db, "select request_id, round_idx, num_accepted_tokens from rounds order by all")
    assert result.exit_code == 0, result.output
    assert result.stdout == """\
request_id  round_idx  num_accepted_tokens
----------  ---------  -------------------
r1                  0                    2
r1                  1                    3
"""
    # The database answers exactly as the trace directory does.
    for query in (REQUESTS_QUERY, "select table_name, row_key, reason from rejected_rows order by all"):
        for fmt in ("table", "csv", "json"):
            assert run("sql", "--db", db, query, "--format", fmt).stdout == \
                run("sql", traces, query, "--format", fmt).stdout


def test_load_replaces_an_existing_database(traces, clean_traces, tmp_path):
    db = tmp_path / "out.duckdb"
    assert run("load", traces, "--db", db).exit_code == 0
    assert run("load", clean_traces, "--db", db).exit_code == 0
    result = run("sql", "--db", db, "select count(*) as n from rejected_rows", "--format", "csv")
    assert result.stdout == "n\n0\n"


def test_loaded_database_needs_no_specan(traces, tmp_path):
    db = tmp_path / "out.duckdb"
    assert run("load", traces, "--db", db).exit_code == 0
    code = textwrap.dedent(f"""
        import duckdb, sys
        assert "analyzer" not in sys.modules
        con = duckdb.connect({str(db)!r}, read_only=True)
        # duckdb 2.x relations (con.sql) have no fetchone(): use execute().
        print(con.execute("select count(*) from rounds").fetchone()[0])
        print(con.execute("select reason from rejected_rows order by reason").fetchall())
        print(con.execute("select table_name, present, num_files, rows_read, rows_clean "
                          "from trace_tables order by table_name").fetchall())
        # Every view of the database answers too (docs/commands.md: "can query the
        # views with no specan present"); print the ones that fail.
        views = [v for (v,) in con.execute(
            "select view_name from duckdb_views() where not internal order by 1").fetchall()]
        for view in views:
            try:
                con.execute(f'select count(*) from "{{view}}"').fetchall()
            except duckdb.Error as exc:
                print("view failed:", view, str(exc).splitlines()[0])
        assert "analyzer" not in sys.modules
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "2\n"
        "[('accepted_exceeds_drafted',), ('negative_duration',), ('time_order',), ('unknown_request',)]\n"
        "[('deployments', True, 1, 1, 1), ('intervals', False, 0, 0, 0), ('requests', True, 1, 3, 2), "
        "('rounds', True, 1, 4, 2), ('steps', True, 1, 2, 1)]\n")


# --------------------------------------------------------------------------- usage errors


@pytest.mark.parametrize("args", [
    ["sql"],                                   # nothing at all
    ["sql", "{traces}"],                       # TRACES without QUERY
    ["sql", "{traces}", "select 1", "extra"],  # one argument too many
    ["sql", "--db", "{db}", "{traces}", "select 1"],   # --db takes QUERY only
    ["sql", "--db", "{db}"],                   # --db without QUERY
    ["sql", "{traces}", "select 1", "--format", "xml"],
    ["validate"],
    ["validate", "{traces}", "--no-such-option"],
])
def test_usage_errors_exit_2(traces, tmp_path, args):
    db = tmp_path / "out.duckdb"
    assert run("load", traces, "--db", db).exit_code == 0
    result = run(*(a.format(traces=traces, db=db) for a in args))
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert "Error" in result.stderr
    assert "Traceback" not in result.stderr


def test_sql_usage_error_says_what_is_expected(traces):
    result = run("sql", traces)
    assert result.exit_code == 2
    assert "expected QUERY with --db, else TRACES QUERY" in result.stderr


def test_sql_bad_query_is_exit_2_one_line(traces):
    result = run("sql", traces, "select * from no_such_table")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert "no_such_table" in result.stderr
    assert "Traceback" not in result.stderr


def test_sql_missing_database_is_exit_2(tmp_path):
    result = run("sql", "--db", tmp_path / "none.duckdb", "select 1")
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1
    assert str(tmp_path / "none.duckdb") in result.stderr
