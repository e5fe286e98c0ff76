"""The fast path over the rounds (analyzer/ingest/load.py, sql/intermediate/request_rounds.sql):
rounds read in place, key rules confirmed from the aggregates, streaming gaps from
per-request packed keys. Every shortcut is checked against the exact definition.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer.api import open_traces
from analyzer.cli import main
from test_rules import load, rejected  # noqa: F401, F811  (a fixture and a helper shared with the row-rule tests)
from tracebuilder import deployment, request, round_row, step, write_traces

ROOT = Path(__file__).resolve().parents[1]

# The streaming gaps as the report reads them (packed per-request keys, and the
# exact window for the requests that cannot be packed) ...
REPORT_GAPS = """
select request_uid, unnest(gaps_us) / 1000.0 from request_rounds where packed
union all
select request_uid, gap_ms from request_gaps_unpacked
"""
# ... and by their definition (docs/metrics.md): itl_gaps, an ordered window over every emission.
WINDOW_GAPS = "select request_uid, gap_ms from itl_gaps"


def rounds_kind(ws) -> str:
    if ws.con.execute("select count(*) from duckdb_views() where view_name = 'rounds'").fetchone()[0]:
        return "view"
    return "table"


def gaps(ws, sql=REPORT_GAPS):
    return sorted(ws.con.execute(sql).fetchall())


def test_clean_rounds_are_read_in_place(load):
    ws = load(requests=[request("a", "r1")], steps=[step("a", 1), step("a", 2)],
              rounds=[round_row("a", "r1", 0, 2, 1, step_id=1), round_row("a", "r1", 1, 2, 2, step_id=2,
                                                                             stop_reason="eos")])
    assert rounds_kind(ws) == "view"
    assert rejected(ws) == []
    assert ws.summary.rows_read["rounds"] == ws.summary.rows_clean["rounds"] == 2


@pytest.mark.parametrize("case, expected", [
    ("duplicate", [("rounds", "deployment_id=a, request_id=r1, round_idx=1", "duplicate_key")] * 2),
    ("unknown_request", [("rounds", "deployment_id=a, request_id=nobody, round_idx=0", "unknown_request")]),
    ("unknown_step", [("rounds", "deployment_id=a, request_id=r1, round_idx=1", "unknown_step")]),
    ("unknown_deployment", [("rounds", "deployment_id=ghost, request_id=r1, round_idx=0", "unknown_deployment")]),
])
def test_key_rules_found_by_the_aggregates_fall_back_to_the_exact_rules(load, case, expected):
    rounds = [round_row("a", "r1", 0, 2, 1, step_id=1), round_row("a", "r1", 1, 2, 2, step_id=2)]
    if case == "duplicate":
        rounds.append(round_row("a", "r1", 1, 2, 0, step_id=2))
    elif case == "unknown_request":
        rounds.append(round_row("a", "nobody", 0, 2, 1, step_id=1))
    elif case == "unknown_step":
        rounds[1]["step_id"] = 99
    else:
        rounds.append(round_row("ghost", "r1", 0, 2, 1))
    ws = load(requests=[request("a", "r1")], steps=[step("a", 1), step("a", 2)],
              rounds=[dict(r, stop_reason=None) for r in rounds])
    # no row rule alone breaks: only the key rules, confirmed after the aggregates, find these
    assert rejected(ws) == sorted(expected)
    assert rounds_kind(ws) == "table"
    assert ws.summary.rejected["rounds"] == {expected[0][2]: len(expected)}
    assert ws.summary.rows_clean["rounds"] == len(rounds) - len(expected)
    # the aggregates were built again from the clean rounds
    assert ws.con.execute("select sum(num_rounds) from request_rounds").fetchone()[0] == len(rounds) - len(expected)


def test_a_round_whose_parent_was_rejected_is_not_unknown(load):
    # the request breaks time_order and the step negative_duration: both are parents as read
    ws = load(requests=[request("a", "r1", arrival=50.0, first=10.0)],
              steps=[step("a", 1, duration_ms=-1.0)],
              rounds=[round_row("a", "r1", 0, 2, 1, step_id=1, stop_reason="eos")])
    assert rejected(ws) == [("requests", "deployment_id=a, request_id=r1", "time_order"),
                            ("steps", "deployment_id=a, step_id=1", "negative_duration")]
    assert rounds_kind(ws) == "view"
    assert ws.con.execute("select has_request, num_rounds from request_rounds").fetchall() == [(False, 1)]


def test_a_row_rule_copies_the_rounds_at_once(load):
    ws = load(rounds=[round_row("a", "r1", 0, 2, 3, stop_reason="eos")])
    assert rejected(ws) == [("rounds", "deployment_id=a, request_id=r1, round_idx=0", "accepted_exceeds_drafted")]
    assert rounds_kind(ws) == "table"


def test_requests_outside_the_packing_bounds_take_the_exact_window(load):
    # r_far: round_idx beyond 2^20; r_long: emissions 13 days apart (over 2^40 µs).
    # (A negative round_idx is rejected as negative_count.) Gaps by hand from step end times.
    day = 86_400_000.0
    ws = load(
        requests=[request("a", "r_far", first=100.0), request("a", "r_long", first=100.0),
                  request("a", "r_ok", first=100.0)],
        steps=[step("a", 1, 10.0, start_ms=110.0),          # ends 120
               step("a", 2, 10.0, start_ms=150.0),          # ends 160
               step("a", 3, 10.0, start_ms=13 * day),       # ends 13 days + 10 ms
               step("a", 4, 5.0, start_ms=200.0)],          # ends 205
        rounds=[round_row("a", "r_far", 0, 1, 0, step_id=1), round_row("a", "r_far", 2_000_000, 1, 0, step_id=2),
                round_row("a", "r_long", 0, 1, 0, step_id=1), round_row("a", "r_long", 1, 1, 0, step_id=3),
                round_row("a", "r_ok", 0, 1, 0, step_id=1), round_row("a", "r_ok", 7, 1, 0, step_id=4)],
    )
    # duplicates are checked on the packed keys: beyond 2^20 the rounds are copied and checked exactly
    assert rounds_kind(ws) == "table" and rejected(ws) == []
    packed = dict(ws.con.execute("select request_id, packed from request_rounds").fetchall())
    assert packed == {"r_far": False, "r_long": False, "r_ok": True}
    got = {(rid, idx): ms for rid, idx, ms in ws.con.execute(
        "select q.request_id, g.round_idx, g.gap_ms from itl_gaps g join requests q using (request_uid)").fetchall()}
    assert got == {("r_far", 0): 20.0, ("r_far", 2_000_000): 40.0,
                   ("r_long", 0): 20.0, ("r_long", 1): 13 * day + 10.0 - 120.0,
                   ("r_ok", 0): 20.0, ("r_ok", 7): 85.0}
    assert gaps(ws) == gaps(ws, WINDOW_GAPS)
    stall = dict(ws.con.execute(
        "select q.request_id, s.max_stall_ms from request_rounds s join requests q using (request_uid) "
        "where s.packed").fetchall())
    assert stall == {"r_ok": 85.0}
    latency = {m: (n, q) for m, n, q in ws.con.execute(
        "select metric, n, q from latency_summary where deployment_id = 'a'").fetchall()}
    # itl from its histogram: 20, 20, 20, 40, 85, 13 days - 110 ms; p50 at rank 2.5 of 0..5
    assert latency["itl"][0] == 6 and latency["itl"][1][0] == pytest.approx(30.0)
    assert latency["max_stall"][0] == 3


def test_sample_gaps_equal_the_window_definition():
    ws = open_traces(ROOT / "sample_traces")
    try:
        assert ws.con.execute("select bool_and(packed) from request_rounds").fetchone()[0]
        packed = gaps(ws)
        assert len(packed) > 100_000
        assert packed == gaps(ws, WINDOW_GAPS)
        # the itl summary from the exact histogram equals DuckDB's quantile_cont over every gap
        from_histogram = ws.con.execute(
            "select deployment_id, n, mean, q, max from latency_summary where metric = 'itl' order by 1").fetchall()
        from_gaps = ws.con.execute(
            "select deployment_id, count(*), avg(gap_ms), quantile_cont(gap_ms, [0.5, 0.9, 0.95, 0.99]), max(gap_ms) "
            "from itl_gaps group by 1 order by 1").fetchall()
        assert len(from_histogram) == len(from_gaps) == 6
        for (d1, n1, mean1, q1, max1), (d2, n2, mean2, q2, max2) in zip(from_histogram, from_gaps):
            assert (d1, n1, max1) == (d2, n2, max2)
            assert mean1 == pytest.approx(mean2, rel=1e-12)
            assert q1 == pytest.approx(q2, rel=1e-12)
    finally:
        ws.close()


# Any order of rounds, holes in round_idx, rounds that commit nothing or have no
# step, requests without a first token: the packed keys give the window's gaps.
# Steps end in step_id order, so a round in an earlier step than one of its request's
# lower round_idx is round_out_of_order (worked out here from the definition).
round_strategy = st.tuples(st.integers(0, 40), st.sampled_from([0, 1, 2]), st.one_of(st.none(), st.integers(1, 6)))


def out_of_order(rows) -> set[int]:
    """The round_idx of a request's rounds that end before an earlier round's step."""
    return {idx for idx, _, step_id in rows if step_id is not None
            and any(i < idx and s is not None and s > step_id for i, _, s in rows)}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(requests=st.lists(st.tuples(st.booleans(), st.lists(round_strategy, min_size=1, max_size=8,
                                                          unique_by=lambda r: r[0])), min_size=1, max_size=4))
def test_packed_gaps_equal_the_window_for_any_rounds(tmp_path_factory, requests):
    root = tmp_path_factory.mktemp("gaps")
    steps = [step("a", s, duration_ms=1.25 * s, start_ms=37.0 * s) for s in range(1, 7)]
    reqs, rounds, expected = [], [], []
    for i, (has_first, rows) in enumerate(requests):
        reqs.append(request("a", f"r{i}", arrival=0.0, first=5.0 if has_first else None, finish=1000.0))
        for idx, committed, step_id in rows:
            rounds.append(round_row("a", f"r{i}", idx, 2, 1, committed=committed, step_id=step_id,
                                    stop_reason="eos"))
        expected += [("rounds", f"deployment_id=a, request_id=r{i}, round_idx={idx}", "round_out_of_order")
                     for idx in out_of_order(rows)]
    write_traces(root, deployments=[deployment("a")], requests=reqs, steps=steps, rounds=rounds)
    ws = open_traces(root)
    try:
        assert rejected(ws) == sorted(expected)
        # a round with a step that commits nothing has no end in the packed keys: the order
        # of such a request is not read off them, and the rounds are copied and classified
        silent = any(committed == 0 and step_id is not None for _, rows in requests for _, committed, step_id in rows)
        assert rounds_kind(ws) == ("view" if not expected and not silent else "table")
        assert gaps(ws) == gaps(ws, WINDOW_GAPS)
        # no streaming gap is negative once the rounds out of order are rejected
        assert all(gap >= 0 for _, gap in gaps(ws, WINDOW_GAPS))
    finally:
        ws.close()


def test_a_round_without_a_context_is_in_no_context_bucket(tmp_path):
    # r1's first round ran at 500 tokens of context, its second names none: the
    # histogram and the cells keep it apart (context_bucket null), and the report says so
    write_traces(tmp_path, deployments=[deployment("a")], requests=[request("a", "r1")],
                 steps=[step("a", 1), step("a", 2)],
                 rounds=[round_row("a", "r1", 0, 4, 2, step_id=1, context_len=500),
                         round_row("a", "r1", 1, 4, 3, step_id=2, context_len=None, stop_reason="eos")])
    ws = open_traces(tmp_path)
    try:
        histogram = sorted(ws.con.execute("select context_bucket, d, k, n from round_histogram").fetchall(),
                           key=str)
        cells = sorted(ws.con.execute("select context_bucket, num_rounds, num_accepted_tokens "
                                      "from round_cells").fetchall(), key=str)
    finally:
        ws.close()
    assert histogram == [("0-1k", 4, 2, 1), (None, 4, 3, 1)]
    assert cells == [("0-1k", 1, 2), (None, 1, 3)]
    result = CliRunner().invoke(main, ["report", str(tmp_path), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "1 round lacks context_len: it is left out of the context curve" in json.loads(result.stdout)["notes"]
