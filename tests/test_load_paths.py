"""One definition of the row rules, evaluated three ways (analyzer/ingest/rules.py):
exact (``specan load``, ``validate``: the rows copied and classified), in place (``specan
sql`` and ``report`` over trace files: the rounds stay a view, their rules counted
in one pass and from the aggregates), and Spark (tests/test_spark.py runs the same
cases). Every rule of every table has a case here, with its rejected rows written
out by hand, and each path must reject exactly those rows.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer import api
from analyzer.cli import main
from analyzer.ingest.schema import load_schemas
from tracebuilder import at, deployment, request, round_row, step, write_table, write_traces

REJECTED = "select table_name, row_key, reason from rejected_rows order by all"

# 9.2e18 µs after the epoch: the year 294247, a time DuckDB holds but no step end after it
BEYOND = 9_223_372_036_854_775_000


def rk(**key) -> str:
    return ", ".join(f"{k}={v}" for k, v in key.items())


def rounds_key(request_id, round_idx, deployment_id="a", **partitions) -> str:
    return rk(deployment_id=deployment_id, request_id=request_id, round_idx=round_idx, **partitions)


def clean_tables() -> dict:
    """A small valid trace: deployment a, two requests, four steps 10 ms apart, five rounds
    (each in its own step, in order). Every case adds rows that break one rule."""
    return dict(
        deployments=[deployment("a")],
        requests=[request("a", "r1", arrival=0.0, first=5.0, finish=100.0),
                  request("a", "r2", arrival=0.0, first=5.0, finish=100.0)],
        steps=[step("a", s, duration_ms=10.0, start_ms=10.0 * s) for s in (1, 2, 3, 4)],
        rounds=[round_row("a", "r1", 0, 3, 2, step_id=1, stop_reason=None),
                round_row("a", "r1", 1, 3, 1, step_id=2, stop_reason=None),
                round_row("a", "r1", 2, 3, 2, step_id=3, committed=1, stop_reason="eos"),
                round_row("a", "r2", 0, 3, 3, step_id=2, stop_reason=None),
                round_row("a", "r2", 1, 3, 0, step_id=4, stop_reason="eos")],
    )


def case(table: str, reason: str, adds: dict, expected: list[tuple[str, str]], **options):
    return pytest.param(table, reason, adds, expected, options, id=f"{table}-{reason}{options.get('variant', '')}")


# Each case: the rows it adds to clean_tables() (or how it lays them out), and the rejected
# rows (table, row_key), under the case's reason unless a third item names another.
CASES = [
    case("deployments", "null_required", {"deployments": [deployment("b", model=None)]}, [
        ("deployments", "deployment_id=b")]),
    case("deployments", "duplicate_key", {"deployments": [deployment("c", gamma=4), deployment("c", gamma=5)]}, [
        ("deployments", "deployment_id=c")] * 2),
    case("requests", "null_required", {"requests": [request("a", "r3", arrival=None)]}, [
        ("requests", rk(deployment_id="a", request_id="r3"))]),
    case("requests", "duplicate_key", {"requests": [request("a", "r2", output_tokens=9)]}, [
        ("requests", rk(deployment_id="a", request_id="r2"))] * 2),
    case("requests", "negative_count", {"requests": [request("a", "r3", prompt_tokens=-1)]}, [
        ("requests", rk(deployment_id="a", request_id="r3"))]),
    # times that no arithmetic on times holds: 9.2e18 µs before the epoch, 290,000 years
    # (the TTFT of such an arrival overflowed a BIGINT); "last" is the row the case adds
    case("requests", "implausible_time", {"requests": [request("a", "r3")], "last": ("requests", "arrival_time", -BEYOND)},
         [("requests", rk(deployment_id="a", request_id="r3"))]),
    case("requests", "time_order", {"requests": [request("a", "r3", arrival=50.0, first=10.0)]}, [
        ("requests", rk(deployment_id="a", request_id="r3"))]),
    case("requests", "unknown_deployment", {"requests": [request("zz", "r3")]}, [
        ("requests", rk(deployment_id="zz", request_id="r3"))]),
    case("steps", "null_required", {"steps": [step("a", 5, duration_ms=None)]}, [
        ("steps", rk(deployment_id="a", step_id=5))]),
    case("steps", "duplicate_key", {"steps": [step("a", 4, duration_ms=11.0)]}, [
        ("steps", rk(deployment_id="a", step_id=4))] * 2),
    case("steps", "negative_count", {"steps": [step("a", 5, batch_size=-1)]}, [
        ("steps", rk(deployment_id="a", step_id=5))]),
    case("steps", "negative_duration", {"steps": [step("a", 5, draft_ms=-0.5)]}, [
        ("steps", rk(deployment_id="a", step_id=5))]),
    # the values that no DECIMAL(18, 6) of the views could hold: a day is the bound, not the cast
    case("steps", "implausible_duration", {"steps": [step("a", 5, verify_ms=1e300), step("a", 6, duration_ms=1e12),
                                                     step("a", 7, duration_ms=86_400_000.0 + 1)]}, [
        ("steps", rk(deployment_id="a", step_id=5)), ("steps", rk(deployment_id="a", step_id=6)),
        ("steps", rk(deployment_id="a", step_id=7))]),
    case("steps", "implausible_time", {"steps": [step("a", 5)], "last": ("steps", "start_time", BEYOND)},
         [("steps", rk(deployment_id="a", step_id=5))]),
    # a step's own token counts (iteration lines): 3 accepted of 2 drafts; 2 requests accepting 1 commit
    # at most 1 + 2 = 3 tokens, not 4
    case("steps", "accepted_exceeds_drafted", {"steps": [step("a", 5, num_draft_tokens=2, num_accepted_tokens=3,
                                                              num_committed_tokens=4)]},
         [("steps", rk(deployment_id="a", step_id=5))]),
    case("steps", "committed_exceeds_accepted", {"steps": [step("a", 5, batch_size=2, num_draft_tokens=4,
                                                                num_accepted_tokens=1, num_committed_tokens=4)]},
         [("steps", rk(deployment_id="a", step_id=5))]),
    case("steps", "unknown_deployment", {"steps": [step("zz", 1)]}, [("steps", rk(deployment_id="zz", step_id=1))]),
    case("rounds", "null_required", {"rounds": [round_row("a", "r2", 2, 3, None, committed=1, step_id=4)]}, [
        ("rounds", rounds_key("r2", 2))]),
    case("rounds", "duplicate_key", {"rounds": [round_row("a", "r1", 1, 3, 0, step_id=2)]}, [
        ("rounds", rounds_key("r1", 1))] * 2),
    case("rounds", "negative_count", {"rounds": [round_row("a", "r2", 2, 3, 1, step_id=4, context_len=-1)]}, [
        ("rounds", rounds_key("r2", 2))]),
    case("rounds", "accepted_exceeds_drafted", {"rounds": [round_row("a", "r2", 2, 3, 4, step_id=4)]}, [
        ("rounds", rounds_key("r2", 2))]),
    case("rounds", "committed_exceeds_accepted", {"rounds": [round_row("a", "r2", 2, 3, 1, step_id=4, committed=3)]}, [
        ("rounds", rounds_key("r2", 2))]),
    case("rounds", "truncated_without_stop", {"rounds": [round_row("a", "r2", 2, 3, 2, step_id=4, committed=1)]}, [
        ("rounds", rounds_key("r2", 2))]),
    # without any stop_reason column, a truncation is valid on the request's last round only
    case("rounds", "truncated_without_stop", {"drop": "stop_reason", "rounds": [
        round_row("a", "r1", 3, 3, 2, step_id=4)]}, [("rounds", rounds_key("r1", 2))], variant="-implicit"),
    # r1's round 3 runs in step 2 (ends 30 ms), before round 2's step 3 (ends 40 ms); round
    # 4 in step 4 (ends 50 ms) is in order. r2's round 2 has no step: nothing to order.
    case("rounds", "round_out_of_order", {"rounds": [round_row("a", "r1", 3, 3, 2, step_id=2),
                                                     round_row("a", "r1", 4, 3, 2, step_id=4),
                                                     round_row("a", "r2", 2, 3, 2)]}, [
        ("rounds", rounds_key("r1", 3))]),
    case("rounds", "unknown_deployment", {"rounds": [round_row("zz", "r1", 0, 3, 2)]}, [
        ("rounds", rounds_key("r1", 0, "zz"))]),
    # a deployments row without its key (null_required) beside rounds of an unknown
    # deployment: the null key matches nothing, so the rounds are still unknown
    case("rounds", "unknown_deployment", {"deployments": [{"deployment_id": None, "model": "m", "method": "eagle",
                                                           "num_speculative_tokens": 4}],
                                          "rounds": [round_row("zz", "r1", 0, 3, 2), round_row("zz", "r1", 1, 3, 2)]},
         [("deployments", "deployment_id=NULL", "null_required"), ("rounds", rounds_key("r1", 0, "zz")),
          ("rounds", rounds_key("r1", 1, "zz"))], variant="-beside-a-null-key"),
    case("rounds", "unknown_request", {"rounds": [round_row("a", "r9", 0, 3, 2, step_id=1)]}, [
        ("rounds", rounds_key("r9", 0))]),
    case("rounds", "unknown_step", {"rounds": [round_row("a", "r2", 2, 3, 2, step_id=99)]}, [
        ("rounds", rounds_key("r2", 2))]),
    # the requests under date= folders, r1 in both: the rounds carry no date, so r1's rounds
    # find two requests
    case("rounds", "ambiguous_request", {"partition_requests": True}, [
        ("rounds", rounds_key("r1", i)) for i in range(3)]),
    # the steps under date= folders with step 2 in both: the rounds of step 2 find two steps
    case("rounds", "ambiguous_step", {"partition_steps": True}, [
        ("rounds", rounds_key("r1", 1)), ("rounds", rounds_key("r2", 0))]),
    case("intervals", "null_required", {"intervals": [{"deployment_id": "a", "end_time": None, "source": "vllm_log"}]},
         [("intervals", "deployment_id=a, series=NULL, end_time=NULL")]),
    case("intervals", "duplicate_key", {"intervals": [{"deployment_id": "a", "end_time": at(10), "source": "vllm_log"}] * 2},
         [("intervals", "deployment_id=a, series=NULL, end_time=2026-11-28 12:00:00.01")] * 2),
    case("intervals", "negative_count", {"intervals": [{"deployment_id": "a", "end_time": at(10), "source": "vllm_log",
                                                        "num_drafts": -1}]},
         [("intervals", "deployment_id=a, series=NULL, end_time=2026-11-28 12:00:00.01")]),
    case("intervals", "implausible_time", {"intervals": [{"deployment_id": "a", "end_time": at(10), "source": "vllm_log"}],
                                           "last": ("intervals", "end_time", BEYOND)},
         [("intervals", "deployment_id=a, series=NULL, end_time=294247-01-10 04:00:54.775")]),
    # a throughput no DECIMAL(18, 3) of the logs speedup could hold
    case("intervals", "implausible_throughput", {"intervals": [{"deployment_id": "a", "end_time": at(10), "source": "vllm_log",
                                                                "generation_tokens_per_s": 1e300}]},
         [("intervals", "deployment_id=a, series=NULL, end_time=2026-11-28 12:00:00.01")]),
    case("intervals", "time_order", {"intervals": [{"deployment_id": "a", "start_time": at(20), "end_time": at(10),
                                                    "source": "vllm_log"}]},
         [("intervals", "deployment_id=a, series=NULL, end_time=2026-11-28 12:00:00.01")]),
]


def write_case(root: Path, adds: dict) -> Path:
    tables = clean_tables()
    for table, rows in adds.items():
        if table in tables:
            tables[table] = tables[table] + rows
    if "drop" in adds:
        tables["rounds"] = [{k: v for k, v in r.items() if k != adds["drop"]} for r in tables["rounds"]]
    if adds.get("partition_requests"):
        requests = tables.pop("requests")
        write_table(root, "requests", {"date=2026-11-27": requests, "date=2026-11-28": requests[:1]})
    if adds.get("partition_steps"):
        steps = tables.pop("steps")
        write_table(root, "steps", {"date=2026-11-27": steps, "date=2026-11-28": steps[1:2]})
    if "intervals" in adds:
        write_table(root, "intervals", adds["intervals"])
    write_traces(root, **tables)
    if "last" in adds:
        table, column, micros = adds["last"]
        set_last_time(root / f"{table}.parquet", column, micros)
    return root



def set_last_time(path: Path, column: str, micros: int) -> None:
    """The last row's ``column`` set to ``micros`` µs since the epoch (beyond what datetime holds)."""
    data = pq.read_table(path)
    values = data.column(column).cast(pa.int64()).to_pylist()
    values[-1] = micros
    typ = data.schema.field(column).type
    pq.write_table(data.set_column(data.column_names.index(column), column,
                                   pa.array(values, pa.int64()).cast(typ)), path)


def cli(*args) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def rejected_rows(*args) -> list[tuple[str, str, str]]:
    text = cli("sql", *args, "--format", "csv")
    return [tuple(row) for row in list(csv.reader(io.StringIO(text)))[1:]]


def rounds_read_in_place(traces: Path) -> bool:
    text = cli("sql", traces, "select count(*) from duckdb_views() where view_name = 'rounds'", "--format", "csv")
    return text.splitlines()[1] == "1"


def test_every_rule_has_a_case():
    covered = {(table, reason) for table, reason, *_ in (p.values for p in CASES)}
    declared = {(table, reason) for table, schema in load_schemas().items() for reason in schema.rule_reasons}
    assert covered == declared


@pytest.mark.parametrize("table, reason, adds, expected, options", CASES)
def test_each_path_rejects_the_rows_the_rule_names(tmp_path, table, reason, adds, expected, options):
    traces = write_case(tmp_path / "traces", adds)
    want = sorted((t, key, other[0] if other else reason) for t, key, *other in expected)
    # in place: specan sql over the trace files (the rounds stay a view when no rule breaks)
    assert rejected_rows(traces, REJECTED) == want
    assert rounds_read_in_place(traces) == (not any(t == "rounds" for t, *_ in expected))
    # exact: specan load copies every table and classifies it
    db = tmp_path / "traces.duckdb"
    cli("load", traces, "--db", db)
    assert rejected_rows("--db", db, REJECTED) == want
    # the clean rounds are the same rows either way
    query = "select deployment_id, request_id, round_idx from rounds order by all"
    assert rejected_rows(traces, query) == rejected_rows("--db", db, query)


def test_a_null_deployment_key_lets_no_round_of_an_unknown_deployment_in(tmp_path):
    # the case: 1,200 rounds of eagle-a, 5 of a deployment nobody declared, and a
    # deployments row without its deployment_id. validate and the report's load must agree.
    rows = [round_row("eagle-a", f"r{i // 100}", i % 100, 3, 2, stop_reason=None) for i in range(1200)]
    rows += [round_row("ghost", "r0", i, 3, 2, stop_reason=None) for i in range(5)]
    traces = write_traces(tmp_path, deployments=[deployment("eagle-a"), deployment(None)], rounds=rows)
    assert cli("sql", traces, "select count(*) from rounds", "--format", "csv") == "count_star()\n1200\n"
    validated = cli("validate", traces)
    assert "rounds             1205       1200         5" in validated
    assert "unknown_deployment                  5" in validated
    assert rejected_rows(traces, "select reason, count(*) from rejected_rows group by all order by all") == [
        ("null_required", "1"), ("unknown_deployment", "5")]


# ----------------------------------------------------------------------------- fuzz

MANGLES = ("null_accepted", "duplicate", "negative_context", "accepted_over_drafted", "committed_over",
           "truncated", "unknown_request", "unknown_step", "unknown_deployment", "no_step", "earlier_step",
           "commits_nothing", "null_deployment_row", "rejected_step", "rejected_request")


def mangled(root: Path, edits: list[tuple[str, int]]) -> Path:
    """The fuzz base: deployments a and b, 3 requests of 4 rounds each, steps 1..12 in order;
    each edit mangles the round (or parent row) it points at."""
    deployments = [deployment("a"), deployment("b", method="none", gamma=0)]
    requests = [request(dep, f"q{i}", arrival=0.0, first=5.0, finish=500.0) for dep in "ab" for i in range(3)]
    steps = [step(dep, s, duration_ms=5.0, start_ms=10.0 * s) for dep in "ab" for s in range(1, 13)]
    rounds = [round_row(dep, f"q{i}", j, 3 if dep == "a" else 0, (i + j) % 4 if dep == "a" else 0,
                        step_id=1 + 4 * i + j, stop_reason="eos" if j == 3 else None)
              for dep in "ab" for i in range(3) for j in range(4)]
    for what, at_row in edits:
        r = rounds[at_row % len(rounds)]
        if what == "null_accepted":
            r["num_accepted_tokens"] = None
        elif what == "duplicate":
            rounds.append(dict(r))
        elif what == "negative_context":
            r["context_len"] = -1
        elif what == "accepted_over_drafted":
            r["num_accepted_tokens"] = r["num_draft_tokens"] + 1
        elif what == "committed_over":
            # over accepted + 1; a round whose accepted count an earlier edit nulled counts it as 0
            r["num_committed_tokens"] = (r["num_accepted_tokens"] or 0) + 2
        elif what == "truncated":
            r["num_committed_tokens"], r["stop_reason"] = r["num_accepted_tokens"], None
        elif what == "unknown_request":
            r["request_id"] = "nobody"
        elif what == "unknown_step":
            r["step_id"] = 99
        elif what == "unknown_deployment":
            r["deployment_id"] = "ghost"
        elif what == "no_step":
            r["step_id"] = None
        elif what == "earlier_step":
            r["step_id"] = max(1, r["step_id"] - 3) if r["step_id"] else 1
        elif what == "commits_nothing":
            r["num_committed_tokens"], r["stop_reason"] = 0, "eos"
        elif what == "null_deployment_row":
            deployments.append({"deployment_id": None, "model": "m", "method": "eagle", "num_speculative_tokens": 4})
        elif what == "rejected_step":
            steps[at_row % len(steps)]["duration_ms"] = -1.0
        elif what == "rejected_request":
            requests[at_row % len(requests)]["first_token_time"] = at(-1)
    return write_traces(root, deployments=deployments, requests=requests, steps=steps, rounds=rounds)


def loaded(traces: Path, in_place: bool) -> tuple[list, list]:
    ws = api.open_traces(traces, views=in_place)
    try:
        return (ws.con.execute(REJECTED).fetchall(),
                ws.con.execute("select * exclude (request_uid, step_uid) from rounds order by all").fetchall())
    finally:
        ws.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.sampled_from(MANGLES), st.integers(0, 40)), max_size=4))
def test_exact_and_in_place_reject_the_same_rows_of_any_mangled_trace(tmp_path_factory, edits):
    traces = mangled(tmp_path_factory.mktemp("mangled"), edits)
    assert loaded(traces, in_place=True) == loaded(traces, in_place=False)
