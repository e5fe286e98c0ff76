"""Structure of a trace directory (docs/trace-format.md, "Layout on disk", "Types",
"Structural errors").

Structural errors go through the CLI: exit status 2, one line on stderr that
names the file, table and column and says what was expected, no traceback.
Inputs that look odd but are valid go through ``open_traces`` so the loaded
values can be checked exactly.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analyzer.api import open_traces
from analyzer.cli import main
from tracebuilder import arrow_table, at, deployment, round_row, write_table, write_traces, request, step

# --------------------------------------------------------------------------- builders






def write_file(path: Path, table: str, rows: list[dict], types: dict | None = None,
               columns: list[str] | None = None) -> Path:
    """One Parquet file of ``table`` at ``path``; ``columns`` picks and orders the columns."""
    data = arrow_table(table, rows, types)
    if columns is not None:
        data = data.select(columns)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, path)
    return path


def validate(path: Path):
    return CliRunner().invoke(main, ["validate", str(path)])


def assert_structural_error(result, *fragments: str) -> str:
    """Exit 2, nothing on stdout, exactly one line on stderr holding every fragment."""
    assert result.exit_code == 2, result.output
    assert result.exc_info[0] is SystemExit          # not an uncaught exception
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def rejected(ws) -> list[tuple[str, str, str]]:
    return sorted(ws.con.execute("select table_name, row_key, reason from rejected_rows").fetchall())


@pytest.fixture
def opened():
    """open(path) -> Workspace, closed after the test."""
    workspaces = []

    def _open(path):
        ws = open_traces(path)
        workspaces.append(ws)
        return ws

    yield _open
    for ws in workspaces:
        ws.close()


# --------------------------------------------------------------------------- structural errors


def test_text_file_named_parquet_is_a_structural_error(tmp_path):
    write_traces(tmp_path, deployments=[deployment("a")])
    bad = tmp_path / "rounds.parquet"
    bad.write_text("deployment_id,request_id\na,r1\n")
    assert_structural_error(validate(tmp_path), str(bad), "table rounds", "not readable Parquet")


def test_unreadable_file_inside_a_partitioned_table_is_named(tmp_path):
    write_traces(tmp_path, deployments=[deployment("a")])
    write_table(tmp_path, "rounds", {"date=2026-11-27": [round_row("a", "r1", 0, 2, 1)]})
    bad = tmp_path / "rounds" / "date=2026-11-28" / "part-0.parquet"
    bad.parent.mkdir()
    bad.write_bytes(b"")
    line = assert_structural_error(validate(tmp_path), str(bad), "table rounds", "not readable Parquet")
    assert "date=2026-11-27" not in line


def test_corrupt_data_pages_name_the_corrupt_file(tmp_path):
    # The footer is intact (so the schema check passes) but every data page of
    # the second partition's file is garbage: the read fails later, in DuckDB.
    # The message must still name the file at fault, not another one.
    write_traces(tmp_path, deployments=[deployment("a")])
    write_table(tmp_path, "rounds", {"date=2026-11-27": [round_row("a", "r1", 0, 2, 1)],
                                     "date=2026-11-28": [round_row("a", "r1", 0, 2, 1)]})
    bad = tmp_path / "rounds" / "date=2026-11-28" / "part-0.parquet"
    data = bytearray(bad.read_bytes())
    footer_len = int.from_bytes(data[-8:-4], "little")
    for i in range(4, len(data) - 8 - footer_len):      # between the leading PAR1 and the footer
        data[i] = 0xFF
    bad.write_bytes(bytes(data))
    pq.read_schema(bad)  # the footer still reads
    assert_structural_error(validate(tmp_path), str(bad), "table rounds")


def test_missing_required_table(tmp_path):
    write_traces(tmp_path, deployments=[deployment("a")])
    assert_structural_error(validate(tmp_path), "table rounds", "required table is missing",
                            "rounds.parquet or rounds/**/*.parquet")


def test_missing_deployments_table(tmp_path):
    write_traces(tmp_path, rounds=[round_row("a", "r1", 0, 2, 1)])
    assert_structural_error(validate(tmp_path), "table deployments", "required table is missing")


def test_required_column_missing_in_one_of_two_files(tmp_path):
    write_traces(tmp_path, deployments=[deployment("a")])
    good = write_file(tmp_path / "rounds" / "a.parquet", "rounds", [round_row("a", "r1", 0, 2, 1)])
    row = round_row("a", "r2", 0, 2, 1)
    del row["num_accepted_tokens"]
    bad = write_file(tmp_path / "rounds" / "b.parquet", "rounds", [row])
    line = assert_structural_error(validate(tmp_path), str(bad), "table rounds", "column num_accepted_tokens",
                                   "required column is missing")
    assert str(good) not in line


def test_required_column_missing_in_one_date_partition(tmp_path):
    write_traces(tmp_path, deployments=[deployment("a")], rounds=[round_row("a", "r1", 0, 2, 1)])
    row = request("a", "r1")
    del row["finish_reason"]
    write_table(tmp_path, "requests", {"date=2026-11-27": [request("a", "r1")], "date=2026-11-28": [row]})
    bad = tmp_path / "requests" / "date=2026-11-28" / "part-0.parquet"
    assert_structural_error(validate(tmp_path), str(bad), "table requests", "column finish_reason",
                            "required column is missing")


def test_varchar_value_in_integer_column_is_uncastable(tmp_path):
    write_traces(tmp_path, deployments=[deployment("a")])
    write_file(tmp_path / "rounds" / "a.parquet", "rounds", [round_row("a", "r1", 0, 2, 1)])
    # A string column is fine as long as every value converts: "3" does, "abc" does not.
    bad = write_file(tmp_path / "rounds" / "b.parquet", "rounds",
                     [round_row("a", "r2", 0, "3", 1), round_row("a", "r2", 1, "abc", 1)],
                     types={"num_draft_tokens": pa.string()})
    assert_structural_error(validate(tmp_path), str(bad), "table rounds", "column num_draft_tokens",
                            "expected INTEGER", "'abc'")


def test_fractional_float_in_integer_column_is_uncastable(tmp_path):
    # 2.5 would be silently rounded by a cast: a count can't be 2.5.
    bad = write_traces(tmp_path, deployments=[deployment("a")],
                       rounds=[round_row("a", "r1", 0, 3.0, 1.0), round_row("a", "r1", 1, 3.0, 2.5)],
                       types={"rounds": {"num_draft_tokens": pa.float64(),
                                         "num_accepted_tokens": pa.float64()}}) / "rounds.parquet"
    assert_structural_error(validate(tmp_path), str(bad), "table rounds", "column num_accepted_tokens",
                            "expected INTEGER", "2.5")


def test_whole_floats_in_integer_column_load(tmp_path, opened):
    # 3.0 converts exactly: not an error.
    write_traces(tmp_path, deployments=[deployment("a")],
                 rounds=[round_row("a", "r1", 0, 3.0, 1.0, 2.0)],
                 types={"rounds": {"num_draft_tokens": pa.float64(), "num_accepted_tokens": pa.float64(),
                                   "num_committed_tokens": pa.float64()}})
    ws = opened(tmp_path)
    assert ws.con.execute("select num_draft_tokens, num_accepted_tokens, num_committed_tokens from rounds"
                          ).fetchall() == [(3, 1, 2)]


def test_integer_too_wide_for_integer_column_is_uncastable(tmp_path):
    bad = write_traces(tmp_path, deployments=[deployment("a")],
                       rounds=[round_row("a", "r1", 0, 2, 1, context_len=3_000_000_000)],
                       types={"rounds": {"context_len": pa.int64()}}) / "rounds.parquet"
    assert_structural_error(validate(tmp_path), str(bad), "table rounds", "column context_len",
                            "expected INTEGER", "3000000000")


def test_fractional_token_id_in_integer_list_is_uncastable(tmp_path):
    # prompt_token_ids is LIST<INTEGER>: a token id of 1.5 is no more castable
    # than a count of 2.5, and must not be rounded to 2.
    bad = write_traces(tmp_path, deployments=[deployment("a")], rounds=[round_row("a", "r1", 0, 2, 1)],
                       requests=[request("a", "r1", prompt_token_ids=[1.5, 7.0])],
                       types={"requests": {"prompt_token_ids": pa.list_(pa.float64())}}) / "requests.parquet"
    assert_structural_error(validate(tmp_path), str(bad), "table requests", "column prompt_token_ids",
                            "expected INTEGER[]")


def test_structural_error_exit_code_through_sql_and_load_too(tmp_path):
    write_traces(tmp_path, deployments=[deployment("a")])
    bad = tmp_path / "rounds.parquet"
    bad.write_text("not parquet")
    runner = CliRunner()
    for args in (["sql", str(tmp_path), "select 1"], ["load", str(tmp_path), "--db", str(tmp_path / "x.duckdb")]):
        assert_structural_error(runner.invoke(main, args), str(bad), "table rounds")
    assert not (tmp_path / "x.duckdb").exists()


# --------------------------------------------------------------------------- valid input


def test_files_differ_in_optional_columns_and_order(tmp_path, opened):
    write_traces(tmp_path, deployments=[deployment("a", target_quant=None), deployment("b")])
    # a.parquet carries the optional columns, with one null each.
    write_file(tmp_path / "rounds" / "a.parquet", "rounds", [
        round_row("a", "r1", 0, 4, 2, num_invalidated_tokens=1, num_verified_nodes=9),
        round_row("a", "r1", 1, 4, 2, num_invalidated_tokens=None, num_verified_nodes=None),
    ])
    # b.parquet has no optional column, and its columns are in reverse order.
    b_rows = [round_row("b", "r1", 0, 3, 1)]
    write_file(tmp_path / "rounds" / "b.parquet", "rounds", b_rows, columns=list(reversed(list(b_rows[0]))))
    write_file(tmp_path / "requests" / "a.parquet", "requests",
               [request("a", "r1", category="chat", num_preemptions=2, structured_output=True)])
    write_file(tmp_path / "requests" / "b.parquet", "requests",
               [request("b", "r1", category=None, num_preemptions=None, structured_output=None)],
               columns=["request_id", "deployment_id", "category", "finish_reason", "output_tokens",
                        "prompt_tokens", "arrival_time", "num_preemptions", "structured_output"])
    write_file(tmp_path / "requests" / "c.parquet", "requests", [request("b", "r2")])  # no category at all
    ws = opened(tmp_path)
    assert rejected(ws) == []
    # Defaults: num_invalidated_tokens 0, num_verified_nodes = num_draft_tokens,
    # for a null value and for a column absent from the file alike.
    assert ws.con.execute("""select deployment_id, request_id, round_idx, num_draft_tokens,
                                    num_invalidated_tokens, num_verified_nodes, num_accepted_tokens,
                                    num_committed_tokens
                             from rounds order by all""").fetchall() == [
        ("a", "r1", 0, 4, 1, 9, 2, 3),
        ("a", "r1", 1, 4, 0, 4, 2, 3),
        ("b", "r1", 0, 3, 0, 3, 1, 2),
    ]
    assert ws.con.execute("""select deployment_id, request_id, category, num_preemptions, structured_output,
                                    first_token_time
                             from requests order by all""").fetchall() == [
        ("a", "r1", "chat", 2, True, at(10).replace(tzinfo=None)),
        ("b", "r1", "unlabeled", 0, False, None),
        ("b", "r2", "unlabeled", 0, False, at(10).replace(tzinfo=None)),
    ]
    assert ws.con.execute("select deployment_id, target_quant from deployments order by 1").fetchall() == [
        ("a", "bf16"), ("b", "bf16")]


def test_steps_default_num_prefill_tokens(tmp_path, opened):
    write_traces(tmp_path, deployments=[deployment("a")], rounds=[round_row("a", "r1", 0, 2, 1, step_id=1)],
                 steps=[step("a", 1), step("a", 2, num_prefill_tokens=None), step("a", 3, num_prefill_tokens=64)])
    ws = opened(tmp_path)
    assert ws.con.execute("select step_id, num_prefill_tokens from steps order by 1").fetchall() == [
        (1, 0), (2, 0), (3, 64)]


def test_extra_unlisted_column_is_kept_and_queryable(tmp_path, opened):
    write_traces(tmp_path, deployments=[deployment("a", region="eu-west")])
    write_file(tmp_path / "rounds" / "a.parquet", "rounds", [round_row("a", "r1", 0, 2, 1, note="warm")])
    write_file(tmp_path / "rounds" / "b.parquet", "rounds", [round_row("a", "r2", 0, 2, 1)])
    ws = opened(tmp_path)
    assert ws.con.execute("select request_id, note from rounds order by 1").fetchall() == [
        ("r1", "warm"), ("r2", None)]
    assert ws.con.execute("select region from deployments").fetchall() == [("eu-west",)]
    assert ws.con.execute("""select table_name, column_name, listed, present, partition from trace_columns
                             where not listed order by all""").fetchall() == [
        ("deployments", "region", False, True, False),
        ("rounds", "note", False, True, False),
    ]


def test_extra_column_named_like_the_internal_row_number_keeps_valid_rows(tmp_path, opened):
    # An unlisted column "_row" is just another kept column. Here r2 is rejected;
    # r1 is valid and must stay in the clean table (a row is never dropped silently).
    write_traces(tmp_path, deployments=[deployment("a")],
                 rounds=[round_row("a", "r1", 0, 2, 1, _row=5), round_row("a", "r2", 0, 2, 3, _row=5)])
    ws = opened(tmp_path)
    assert rejected(ws) == [("rounds", "deployment_id=a, request_id=r2, round_idx=0", "accepted_exceeds_drafted")]
    assert ws.summary.rows_clean["rounds"] == 1
    assert ws.con.execute('select request_id, "_row" from rounds').fetchall() == [("r1", 5)]


def test_extra_column_named_request_uid_does_not_change_joins(tmp_path, opened):
    # An engine's own "request_uid" column is unlisted: no join may use it.
    # The rounds of r1 and r2 must still join their own requests.
    write_traces(tmp_path, deployments=[deployment("a")],
                 requests=[request("a", "r1", prompt_tokens=100), request("a", "r2", prompt_tokens=200)],
                 rounds=[round_row("a", "r1", 0, 2, 1, request_uid=7), round_row("a", "r2", 0, 2, 1, request_uid=7)])
    ws = opened(tmp_path)
    assert rejected(ws) == []
    assert ws.con.execute("""select r.request_id, q.prompt_tokens from rounds r
                             join requests q on q.request_uid = r.request_uid order by 1""").fetchall() == [
        ("r1", 100), ("r2", 200)]


INSTANT = dt.datetime(2026, 11, 28, 12, 0, 0, 123456, tzinfo=dt.timezone.utc)
EXPECTED = dt.datetime(2026, 11, 28, 12, 0, 0, 123456)      # DuckDB TIMESTAMP, read as UTC

TIME_TYPES = {
    "us_utc": (pa.timestamp("us", tz="UTC"), INSTANT),
    "ns_utc": (pa.timestamp("ns", tz="UTC"), INSTANT),
    "us_naive": (pa.timestamp("us"), INSTANT.replace(tzinfo=None)),
    "ns_naive": (pa.timestamp("ns"), INSTANT.replace(tzinfo=None)),
    # Parquet stores tz-aware times as UTC; the zone name must not shift them.
    "us_tokyo": (pa.timestamp("us", tz="Asia/Tokyo"), INSTANT),
    "ns_new_york": (pa.timestamp("ns", tz="America/New_York"), INSTANT),
}


def _timed_request(request_id: str, typ: pa.DataType, value: dt.datetime) -> pa.Table:
    return arrow_table("requests", [request("a", request_id, arrival_time=value, first_token_time=None,
                                            finish_time=None)],
                       types={"arrival_time": typ, "first_token_time": typ, "finish_time": typ})


@pytest.mark.parametrize("kind", list(TIME_TYPES))
def test_timestamp_kinds_read_as_the_same_utc_instant(tmp_path, opened, kind):
    typ, value = TIME_TYPES[kind]
    write_traces(tmp_path, deployments=[deployment("a")], rounds=[round_row("a", "r1", 0, 2, 1)])
    pq.write_table(_timed_request("r1", typ, value), tmp_path / "requests.parquet")
    ws = opened(tmp_path)
    assert ws.con.execute("select arrival_time from requests").fetchall() == [(EXPECTED,)]


def test_timestamp_kinds_mixed_across_files_of_one_table(tmp_path, opened):
    write_traces(tmp_path, deployments=[deployment("a")])
    for kind, (typ, value) in TIME_TYPES.items():
        (tmp_path / "requests").mkdir(exist_ok=True)
        pq.write_table(_timed_request(kind, typ, value), tmp_path / "requests" / f"{kind}.parquet")
        write_file(tmp_path / "rounds" / f"{kind}.parquet", "rounds", [round_row("a", kind, 0, 2, 1)])
    ws = opened(tmp_path)
    assert rejected(ws) == []
    assert ws.con.execute("select request_id, arrival_time from requests order by 1").fetchall() == [
        (kind, EXPECTED) for kind in sorted(TIME_TYPES)]


def test_timestamp_kinds_mixed_within_one_row(tmp_path, opened):
    # Naive arrival, Tokyo-zoned first token 5 ms later, ns UTC finish 10 ms later:
    # all UTC instants, so the row is in time order and each value is exact.
    write_traces(tmp_path, deployments=[deployment("a")], rounds=[round_row("a", "r1", 0, 2, 1)])
    row = request("a", "r1", arrival_time=INSTANT.replace(tzinfo=None),
                  first_token_time=INSTANT + dt.timedelta(milliseconds=5),
                  finish_time=INSTANT + dt.timedelta(milliseconds=10))
    write_table(tmp_path, "requests", [row], types={"arrival_time": pa.timestamp("us"),
                                                    "first_token_time": pa.timestamp("us", tz="Asia/Tokyo"),
                                                    "finish_time": pa.timestamp("ns", tz="UTC")})
    ws = opened(tmp_path)
    assert rejected(ws) == []
    assert ws.con.execute("select arrival_time, first_token_time, finish_time from requests").fetchall() == [
        (EXPECTED, EXPECTED + dt.timedelta(milliseconds=5), EXPECTED + dt.timedelta(milliseconds=10))]


def test_timestamps_ignore_the_process_time_zone(tmp_path, opened, monkeypatch):
    # "no session time-zone shift": a user in Tokyo gets the same UTC instants.
    import time
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        write_traces(tmp_path, deployments=[deployment("a")], rounds=[round_row("a", "naive", 0, 2, 1)])
        write_file(tmp_path / "requests" / "naive.parquet", "requests",
                   [request("a", "naive", arrival_time=INSTANT.replace(tzinfo=None), first_token_time=None,
                            finish_time=None)],
                   types={"arrival_time": pa.timestamp("us")})
        write_file(tmp_path / "requests" / "aware.parquet", "requests",
                   [request("a", "aware", arrival_time=INSTANT, first_token_time=None, finish_time=None)],
                   types={"arrival_time": pa.timestamp("ns", tz="UTC")})
        ws = opened(tmp_path)
        assert rejected(ws) == []
        assert ws.con.execute("select request_id, arrival_time from requests order by 1").fetchall() == [
            ("aware", EXPECTED), ("naive", EXPECTED)]
    finally:
        monkeypatch.undo()
        time.tzset()


def test_integer_widths(tmp_path, opened):
    write_traces(
        tmp_path, deployments=[deployment("a", kv_capacity_tokens=5_000_000_000)],
        steps=[step("a", 1), step("a", 5_000_000_000)],
        rounds=[round_row("a", "r1", 0, 4, 3, step_id=1, context_len=70000),
                round_row("a", "r1", 1, 4, 2, step_id=5_000_000_000, context_len=70004)],
        types={"deployments": {"num_speculative_tokens": pa.int8(), "kv_capacity_tokens": pa.uint64()},
               "steps": {"step_id": pa.int64(), "batch_size": pa.uint8()},
               "rounds": {"round_idx": pa.int8(), "num_draft_tokens": pa.uint8(),
                          "num_accepted_tokens": pa.int64(), "num_committed_tokens": pa.int16(),
                          "step_id": pa.int64(), "context_len": pa.uint32()}})
    ws = opened(tmp_path)
    assert rejected(ws) == []
    assert ws.con.execute("""select round_idx, num_draft_tokens, num_accepted_tokens, num_committed_tokens,
                                    step_id, context_len from rounds order by 1""").fetchall() == [
        (0, 4, 3, 4, 1, 70000), (1, 4, 2, 3, 5_000_000_000, 70004)]
    types = dict(ws.con.execute("select column_name, column_type from (describe rounds)").fetchall())
    assert (types["round_idx"], types["num_draft_tokens"], types["step_id"]) == ("INTEGER", "INTEGER", "BIGINT")
    assert ws.con.execute("select num_speculative_tokens, kv_capacity_tokens from deployments").fetchall() == [
        (4, 5_000_000_000)]


def test_all_null_column_of_null_type(tmp_path, opened):
    # Parquet's Null type converts to any listed type; values stay null.
    write_traces(
        tmp_path, deployments=[deployment("a", draft_quant=None)],
        requests=[request("a", "r1", first_token_time=None, finish_time=None, temperature=None,
                          category=None, num_preemptions=None)],
        steps=[step("a", 1, draft_ms=None)],
        rounds=[round_row("a", "r1", 0, 2, 1, step_id=None, context_len=None, stop_reason=None)],
        types={"deployments": {"draft_quant": pa.null()},
               "requests": {"first_token_time": pa.null(), "finish_time": pa.null(), "temperature": pa.null(),
                            "category": pa.null(), "num_preemptions": pa.null()},
               "steps": {"draft_ms": pa.null()},
               "rounds": {"step_id": pa.null(), "context_len": pa.null(), "stop_reason": pa.null()}})
    ws = opened(tmp_path)
    assert rejected(ws) == []
    assert ws.con.execute("""select first_token_time, finish_time, temperature, category, num_preemptions
                             from requests""").fetchall() == [(None, None, None, "unlabeled", 0)]
    assert ws.con.execute("select step_id, context_len, stop_reason from rounds").fetchall() == [
        (None, None, None)]
    types = dict(ws.con.execute("select column_name, column_type from (describe rounds)").fetchall())
    assert (types["step_id"], types["context_len"], types["stop_reason"]) == ("BIGINT", "INTEGER", "VARCHAR")


def test_all_null_required_column_rejects_rows_not_structure(tmp_path, opened):
    write_traces(tmp_path, deployments=[deployment("a")],
                 rounds=[round_row("a", "r1", 0, None, 1)], types={"rounds": {"num_draft_tokens": pa.null()}})
    ws = opened(tmp_path)
    assert rejected(ws) == [("rounds", "deployment_id=a, request_id=r1, round_idx=0", "null_required")]


def test_nan_and_infinity_read_as_null(tmp_path, opened):
    nan, inf = float("nan"), float("inf")
    write_traces(
        tmp_path, deployments=[deployment("a")], rounds=[round_row("a", "r1", 0, 2, 1, step_id=1)],
        requests=[request("a", "r1", temperature=nan, quality_score=-inf)],
        steps=[step("a", 1, draft_ms=nan, verify_ms=inf, kv_usage=-inf),
               step("a", 2, draft_ms=1.5, verify_ms=2.5, kv_usage=0.5),
               # duration_ms is required: NaN there is a missing required value.
               step("a", 3, duration_ms=nan)])
    ws = opened(tmp_path)
    assert ws.con.execute("select step_id, draft_ms, verify_ms, kv_usage from steps order by 1").fetchall() == [
        (1, None, None, None), (2, 1.5, 2.5, 0.5)]
    assert ws.con.execute("select temperature, quality_score from requests").fetchall() == [(None, None)]
    assert rejected(ws) == [("steps", "deployment_id=a, step_id=3", "null_required")]


def test_zero_row_file_beside_other_files(tmp_path, opened):
    write_traces(tmp_path, deployments=[deployment("a")])
    write_file(tmp_path / "rounds" / "a.parquet", "rounds", [round_row("a", "r1", 0, 2, 1)])
    empty = arrow_table("rounds", [round_row("a", "r1", 0, 2, 1, step_id=1)]).slice(0, 0)
    pq.write_table(empty, tmp_path / "rounds" / "b.parquet")
    ws = opened(tmp_path)
    assert ws.con.execute("select request_id, round_idx from rounds").fetchall() == [("r1", 0)]
    assert ws.summary.rows_read["rounds"] == 1


def test_zero_row_tables(tmp_path, opened):
    def empty(table, row):
        pq.write_table(arrow_table(table, [row]).slice(0, 0), tmp_path / f"{table}.parquet")

    empty("deployments", deployment("a"))
    empty("requests", request("a", "r1"))
    empty("rounds", round_row("a", "r1", 0, 2, 1))
    ws = opened(tmp_path)
    assert ws.summary.rows_read == {"deployments": 0, "requests": 0, "steps": 0, "rounds": 0, "intervals": 0}
    assert ws.summary.present == {"deployments": True, "requests": True, "steps": False, "rounds": True, "intervals": False}
    assert rejected(ws) == []
    assert ws.con.execute("select table_name, present, num_files, rows_read, rows_clean from trace_tables"
                          " order by 1").fetchall() == [
        ("deployments", True, 1, 0, 0), ("intervals", False, 0, 0, 0), ("requests", True, 1, 0, 0),
        ("rounds", True, 1, 0, 0), ("steps", False, 0, 0, 0)]


# --------------------------------------------------------------------------- Hive partitions


def _write_two_days(tmp_path: Path, *, extra_rounds_28=()) -> None:
    """Two dates whose engine restarted its counters: request r1 and step 1 exist on both.

    The two r1 differ in prompt_tokens (100 vs 200), the two step 1 in duration (10 vs 20 ms),
    so a join shows which date's parent a round found.
    """
    write_table(tmp_path, "deployments", {"date=2026-11-27": [deployment("a")],
                                          "date=2026-11-28": [deployment("a")]})
    write_table(tmp_path, "requests", {
        "date=2026-11-27": [request("a", "r1", prompt_tokens=100), request("a", "r2", prompt_tokens=300)],
        "date=2026-11-28": [request("a", "r1", prompt_tokens=200)],
    })
    write_table(tmp_path, "steps", {
        "date=2026-11-27": [step("a", 1, duration_ms=10.0), step("a", 2, duration_ms=30.0)],
        "date=2026-11-28": [step("a", 1, duration_ms=20.0)],
    })
    write_table(tmp_path, "rounds", {
        "date=2026-11-27": [round_row("a", "r1", 0, 2, 1, step_id=1)],
        "date=2026-11-28": [round_row("a", "r1", 0, 2, 2, step_id=1), *extra_rounds_28],
    })


def test_hive_partitions_same_key_on_two_dates_is_not_duplicate(tmp_path, opened):
    _write_two_days(tmp_path)
    ws = opened(tmp_path)
    assert rejected(ws) == []
    assert ws.con.execute("""select cast("date" as varchar), request_id, round_idx, num_accepted_tokens
                             from rounds order by 1""").fetchall() == [
        ("2026-11-27", "r1", 0, 1), ("2026-11-28", "r1", 0, 2)]


def test_hive_partitions_round_joins_its_own_dates_request_and_step(tmp_path, opened):
    _write_two_days(tmp_path)
    ws = opened(tmp_path)
    # Each round finds exactly one request and one step: those of its own date.
    assert ws.con.execute("""
        select cast(r."date" as varchar), q.prompt_tokens, s.duration_ms
        from rounds r
        join requests q on q.request_uid = r.request_uid
        join steps s on s.step_uid = r.step_uid
        order by 1""").fetchall() == [("2026-11-27", 100, 10.0), ("2026-11-28", 200, 20.0)]


def test_hive_partitions_parent_only_on_another_date_is_unknown(tmp_path, opened):
    # r2 and step 2 exist on 11-27 only; a round of 11-28 can't use them.
    _write_two_days(tmp_path, extra_rounds_28=[round_row("a", "r2", 0, 2, 1),
                                               round_row("a", "r1", 1, 2, 1, step_id=2)])
    ws = opened(tmp_path)
    assert rejected(ws) == [
        ("rounds", "deployment_id=a, request_id=r1, round_idx=1, date=2026-11-28", "unknown_step"),
        ("rounds", "deployment_id=a, request_id=r2, round_idx=0, date=2026-11-28", "unknown_request"),
    ]


def test_hive_partitions_duplicate_within_one_date(tmp_path, opened):
    _write_two_days(tmp_path, extra_rounds_28=[round_row("a", "r1", 0, 2, 1, step_id=1)])
    ws = opened(tmp_path)
    assert rejected(ws) == [
        ("rounds", "deployment_id=a, request_id=r1, round_idx=0, date=2026-11-28", "duplicate_key")] * 2


def test_hive_deployments_are_looked_up_across_dates(tmp_path, opened):
    # deployments ignores its partition columns for keys and joins: b, listed on
    # 11-27 only, is known to a round of 11-28.
    write_table(tmp_path, "deployments", {"date=2026-11-27": [deployment("a"), deployment("b")],
                                          "date=2026-11-28": [deployment("a")]})
    write_table(tmp_path, "rounds", {"date=2026-11-28": [round_row("b", "r1", 0, 2, 1),
                                                         round_row("zz", "r1", 0, 2, 1)]})
    ws = opened(tmp_path)
    assert rejected(ws) == [
        ("rounds", "deployment_id=zz, request_id=r1, round_idx=0, date=2026-11-28", "unknown_deployment")]
    assert ws.con.execute("select deployment_id from deployments order by 1").fetchall() == [("a",), ("b",)]


def test_hive_rounds_join_unpartitioned_requests_on_documented_columns(tmp_path, opened):
    # requests share no partition column with rounds: the join is (deployment_id,
    # request_id) only, so r1's rounds on both dates find the single r1.
    write_traces(tmp_path, deployments=[deployment("a")], requests=[request("a", "r1", prompt_tokens=7)])
    write_table(tmp_path, "rounds", {"date=2026-11-27": [round_row("a", "r1", 0, 2, 1)],
                                     "date=2026-11-28": [round_row("a", "r1", 0, 2, 1)]})
    ws = opened(tmp_path)
    assert rejected(ws) == []
    assert ws.con.execute("""select cast(r."date" as varchar), q.prompt_tokens from rounds r
                             join requests q using (request_uid) order by 1""").fetchall() == [
        ("2026-11-27", 7), ("2026-11-28", 7)]


def test_hive_partition_folder_order_does_not_change_the_join(tmp_path, opened):
    # requests nest date=/shard=, rounds and steps shard=/date=: the keys they share
    # are hashed by name, so every round finds its request and its step.
    write_traces(tmp_path, deployments=[deployment("a")])
    write_table(tmp_path, "requests", {"date=2026-11-28/shard=0": [request("a", "r1", prompt_tokens=7)],
                                       "date=2026-11-28/shard=1": [request("a", "r2", prompt_tokens=9)]})
    write_table(tmp_path, "steps", {"shard=0/date=2026-11-28": [step("a", 1, duration_ms=10.0)],
                                    "shard=1/date=2026-11-28": [step("a", 1, duration_ms=30.0)]})
    write_table(tmp_path, "rounds", {"shard=0/date=2026-11-28": [round_row("a", "r1", 0, 2, 1, step_id=1)],
                                     "shard=1/date=2026-11-28": [round_row("a", "r2", 0, 2, 2, step_id=1)]})
    ws = opened(tmp_path)
    assert rejected(ws) == []
    assert ws.con.execute("""select r.request_id, q.prompt_tokens, s.duration_ms from rounds r
                             join requests q using (request_uid) join steps s using (step_uid)
                             order by 1""").fetchall() == [("r1", 7, 10.0), ("r2", 9, 30.0)]
    assert ws.con.execute("select count(*) from round_facts where has_step and has_request").fetchone()[0] == 2


def test_step_ids_restarting_per_date_with_unpartitioned_rounds_are_ambiguous(tmp_path, opened):
    # Steps restart their ids each day under date= folders; the rounds sit in one
    # unpartitioned file, so (deployment_id, step_id) finds a step on each date.
    # Such rounds are rejected as ambiguous_step instead of joining both steps.
    write_traces(tmp_path, deployments=[deployment("a")], requests=[request("a", "r1"), request("a", "r2")],
                 rounds=[round_row("a", "r1", 0, 2, 1, step_id=1), round_row("a", "r1", 1, 2, 2, step_id=2),
                         round_row("a", "r2", 0, 2, 0, step_id=3)])
    write_table(tmp_path, "steps", {"date=2026-11-27": [step("a", 1), step("a", 2, duration_ms=20.0)],
                                    "date=2026-11-28": [step("a", 1), step("a", 3, duration_ms=30.0)]})
    ws = opened(tmp_path)
    assert rejected(ws) == [("rounds", "deployment_id=a, request_id=r1, round_idx=0", "ambiguous_step")]
    # nothing multiplied: two clean rounds, each with its one step
    assert ws.con.execute("select num_rounds, rounds_with_step from accept_length join speedup "
                          "using (deployment_id)").fetchall() == [(2, 2)]
    assert ws.con.execute("select sum(num_rounds) from request_rounds").fetchone()[0] == 2
    assert ws.summary.rejected["rounds"] == {"ambiguous_step": 1}


def test_a_request_on_two_dates_with_unpartitioned_rounds_is_ambiguous(tmp_path, opened):
    write_traces(tmp_path, deployments=[deployment("a")],
                 rounds=[round_row("a", "r1", 0, 2, 1), round_row("a", "r2", 0, 2, 1)])
    write_table(tmp_path, "requests", {"date=2026-11-27": [request("a", "r1"), request("a", "r2")],
                                       "date=2026-11-28": [request("a", "r1")]})
    ws = opened(tmp_path)
    assert rejected(ws) == [("rounds", "deployment_id=a, request_id=r1, round_idx=0", "ambiguous_request")]
    assert ws.con.execute("select request_id, num_rounds from request_rounds").fetchall() == [("r2", 1)]


def test_unknown_comes_before_ambiguous_in_the_rule_order():
    from analyzer.ingest.schema import load_schemas

    assert load_schemas()["rounds"].rule_reasons[-5:] == (
        "unknown_deployment", "unknown_request", "unknown_step", "ambiguous_request", "ambiguous_step")


# --------------------------------------------------------------------------- times given as text

TEXT_TIMES = {"arrival_time": pa.string(), "first_token_time": pa.string(), "finish_time": pa.string()}


def test_times_written_as_iso_text_are_read_as_utc(tmp_path):
    # The arrival: 14:00:00.010 at +02:00 is 12:00:00.010 UTC. The first token is
    # given in Z, the finish without an offset (UTC). Steps end at 70 and 85 ms after 12:00
    # UTC, so the gaps are 70 − 50 = 20 and 85 − 70 = 15 ms: ITL mean 17.5, TTFT 50 − 10 = 40,
    # e2el 1000 − 10 = 990 (with the offset dropped, arrival would be two hours late).
    write_traces(tmp_path, deployments=[deployment("a")],
                 requests=[request("a", "r1", arrival_time="2026-11-28T14:00:00.010+02:00",
                                   first_token_time="2026-11-28T12:00:00.050Z", finish_time="2026-11-28 12:00:01")],
                 steps=[step("a", 1, start_ms=60.0), step("a", 2, start_ms=75.0)],
                 rounds=[round_row("a", "r1", 0, 2, 1, step_id=1, stop_reason=None),
                         round_row("a", "r1", 1, 2, 1, step_id=2, stop_reason="eos")],
                 types={"requests": TEXT_TIMES})
    runner = CliRunner()
    shown = runner.invoke(main, ["sql", str(tmp_path), "select arrival_time, first_token_time, finish_time "
                                 "from requests", "--format", "csv"])
    assert shown.output == ("arrival_time,first_token_time,finish_time\n"
                            "2026-11-28 12:00:00.010000,2026-11-28 12:00:00.050000,2026-11-28 12:00:01\n")
    report = runner.invoke(main, ["report", str(tmp_path), "--format", "json"])
    assert report.exit_code == 0, report.output
    (row,) = json.loads(report.stdout)["deployments"]
    latency = row["latency_ms"]
    assert (latency["itl"]["mean"], latency["itl"]["max"], latency["ttft"]["mean"], latency["e2el"]["mean"]) == (
        17.5, 20.0, 40.0, 990.0)
    assert json.loads(report.stdout)["input"]["rejected_rows"] == 0


@pytest.mark.parametrize("text", ["28/11/2026 14:00", "epoch", "infinity", "2026-11-28 14:00:00 Europe/Berlin",
                                  "20261128T140000Z", "2026-11-28T14:00:00 +02:00", "2026-11-28T25:00:00Z"])
def test_a_time_text_that_is_not_iso_8601_is_a_structural_error(tmp_path, text):
    # DuckDB alone would read 'epoch', 'infinity' and a zone name as times; specan does not
    write_traces(tmp_path, deployments=[deployment("a")], rounds=[round_row("a", "r1", 0, 2, 1)],
                 requests=[request("a", "r1", arrival_time=text, first_token_time=None, finish_time=None)],
                 types={"requests": TEXT_TIMES})
    assert_structural_error(CliRunner().invoke(main, ["report", str(tmp_path)]), str(tmp_path / "requests.parquet"),
                            "table requests, column arrival_time", f"value {text!r} that is not an ISO-8601 time")


# --------------------------------------------------------------------------- a damaged data page


def damage_column(path: Path, column: str) -> None:
    """Overwrite the header of ``column``'s first data page: the footer still reads."""
    meta = pq.ParquetFile(path).metadata
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    offset = meta.row_group(0).column(names.index(column)).data_page_offset
    data = bytearray(path.read_bytes())
    data[offset:offset + 12] = b"\xff" * 12
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("command", [["validate"], ["report"], ["sql", "select count(*) from rounds"],
                                     ["recommend", "--deployment", "a"], ["load", "--db", "{tmp}/t.duckdb"],
                                     ["nightly", "--date", "2026-11-28", "--out", "{tmp}/nightly"]])
def test_a_damaged_data_page_is_exit_2_naming_the_file_whatever_the_command(tmp_path, command):
    # deployment_id's page: the count of its nulls could be read off the footer's statistics,
    # so only a pass that reads the values finds it before a view does
    traces = tmp_path / "traces"
    write_traces(traces, deployments=[deployment("a")], steps=[step("a", i) for i in range(200)])
    write_table(traces, "rounds", {"date=2026-11-28": [round_row("a", f"r{i // 10}", i % 10, 3, 2, step_id=i,
                                                                 stop_reason=None) for i in range(200)]})
    bad = traces / "rounds" / "date=2026-11-28" / "part-0.parquet"
    damage_column(bad, "deployment_id")
    args = [command[0], str(traces)] + [a.replace("{tmp}", str(tmp_path)) for a in command[1:]]
    line = assert_structural_error(CliRunner().invoke(main, args), f"{bad}: table rounds: not readable Parquet (")
    assert line.startswith(f"Error: {bad}: table rounds: not readable Parquet (")


def test_a_damaged_page_of_an_unlisted_column_is_named_when_a_query_reads_it(tmp_path):
    # no view reads tenant_note, so the load does not decode it; the query that does names the file
    write_traces(tmp_path, deployments=[deployment("a")],
                 rounds=[round_row("a", f"r{i // 10}", i % 10, 3, 2, stop_reason=None, tenant_note=f"t{i}")
                         for i in range(200)])
    damage_column(tmp_path / "rounds.parquet", "tenant_note")
    runner = CliRunner()
    assert runner.invoke(main, ["sql", str(tmp_path), "select count(*) from accept_length"]).exit_code == 0
    assert_structural_error(runner.invoke(main, ["sql", str(tmp_path), "select count(distinct tenant_note) from rounds"]),
                            f"{tmp_path / 'rounds.parquet'}: table rounds: not readable Parquet (")
