"""Metric views (docs/metrics.md) on tiny hand-built traces.

Every expected number is worked out by hand in the comment next to it, from the
definitions in docs/metrics.md, never copied from the views' output. Where a
comparison needs many samples (latency percentiles) the expected value is
computed in the test with numpy's default (linear) percentile, as docs/metrics.md says.
"""

from __future__ import annotations

import numpy as np
import pytest

from analyzer import api
from tracebuilder import at, deployment, lift_floors, round_row, write_table, write_traces, request, step

# --------------------------------------------------------------------------- builders






@pytest.fixture
def load(tmp_path):
    """load(deployments=[...], rounds=[...], ...) -> Workspace, closed after the test."""
    opened = []

    def _load(**tables):
        root = tmp_path / f"traces{len(opened)}"
        write_traces(root, **tables)
        ws = api.open_traces(root)
        opened.append(ws)
        return ws

    yield _load
    for ws in opened:
        ws.close()


def rows(ws, sql: str, params=None) -> list[dict]:
    result = ws.con.execute(sql, params or [])
    names = [d[0] for d in result.description]
    return [dict(zip(names, r)) for r in result.fetchall()]


def one(ws, sql: str, params=None) -> dict:
    found = rows(ws, sql, params)
    assert len(found) == 1, found
    return found[0]


def rejected(ws) -> list[tuple]:
    return ws.con.execute("select table_name, row_key, reason from rejected_rows order by all").fetchall()


# --------------------------------------------------------------------------- 1. truncation


def test_truncated_rounds_and_tokens(load):
    ws = load(
        deployments=[deployment("spec", gamma=4)],
        rounds=[
            # request a: a full round, then a stop inside the round (K=2 but only 1 token kept)
            round_row("spec", "a", 0, 4, 3, stop_reason=None),             # committed 4
            round_row("spec", "a", 1, 4, 2, 1, stop_reason="eos"),         # truncated: 2+1-1 = 2 tokens
            # request b: a full round, then a stop string cut the round (K=2, 2 of 3 kept)
            round_row("spec", "b", 0, 3, 3, stop_reason=None),             # committed 4
            round_row("spec", "b", 1, 2, 2, 2, stop_reason="stop_string"),  # truncated: 2+1-2 = 1 token
            # request c: a plain round, then a stopping round that is NOT truncated (c = K+1)
            round_row("spec", "c", 0, 0, 0, stop_reason=None),             # committed 1
            round_row("spec", "c", 1, 4, 0, 1, stop_reason="length"),      # committed 1 = 0+1
        ],
    )
    assert rejected(ws) == []
    got = one(ws, "select * from accept_length where deployment_id = 'spec'")
    # rounds 6; speculative rounds (drafts > 0): a0 a1 b0 b1 c1 = 5
    assert got["num_rounds"] == 6
    assert got["num_spec_rounds"] == 5
    # drafts 4+4+3+2+0+4 = 17; accepted C = 3+2+3+2+0+0 = 10; committed 4+1+4+2+1+1 = 13
    assert got["num_draft_tokens"] == 17
    assert got["num_accepted_tokens"] == 10
    assert got["num_committed_tokens"] == 13
    # truncated: a1 (2 tokens) and b1 (1 token); c1 stops but commits K+1, so it is not truncated
    assert got["truncated_rounds"] == 2
    assert got["truncated_tokens"] == 3
    # tokens_per_round = 13 / 6: it sees the truncation (without it: 16/6)
    assert got["tokens_per_round"] == pytest.approx(13 / 6, rel=1e-12)
    # mean_accept_length = 1 + C/R = 1 + 10/5 = 3.0: K is counted before truncation
    assert got["mean_accept_length"] == pytest.approx(3.0, rel=1e-12)
    # acceptance_rate = 10 / 17
    assert got["acceptance_rate"] == pytest.approx(10 / 17, rel=1e-12)
    # ledger: committed = Σ (K+1) − truncated_tokens = (10 + 6) − 3 = 13
    assert got["num_accepted_tokens"] + got["num_rounds"] - got["truncated_tokens"] == got["num_committed_tokens"]


# --------------------------------------------------------------------------- 2. invalidation


def test_structured_invalidation(load):
    ws = load(
        deployments=[deployment("spec", gamma=4)],
        requests=[
            request("spec", "q1", structured_output=True),
            request("spec", "q2", structured_output=False),
            request("spec", "q3", structured_output=None),  # default false
        ],
        rounds=[
            # q1, structured
            round_row("spec", "q1", 0, 3, 2, num_invalidated_tokens=1),     # 3 drafted, 1 cut, K=2
            round_row("spec", "q1", 1, 0, 0, num_invalidated_tokens=4),     # grammar cut every draft
            round_row("spec", "q1", 2, 2, 0, num_invalidated_tokens=2),     # 2 drafted, 2 cut, K=0
            round_row("spec", "q1", 3, 0, 0, num_invalidated_tokens=0),     # plain round, nothing cut
            # q2, not structured
            round_row("spec", "q2", 0, 4, 4, num_invalidated_tokens=0),
            round_row("spec", "q2", 1, 4, 1, num_invalidated_tokens=None),  # default 0
            # q3, structured_output null -> false
            round_row("spec", "q3", 0, 4, 3, num_invalidated_tokens=0),
        ],
    )
    assert rejected(ws) == []
    by_flag = {r["structured_output"]: r for r in rows(
        ws, "select * from structured_invalidation where deployment_id = 'spec'")}
    assert set(by_flag) == {True, False}

    s = by_flag[True]
    # rounds 4; drafts 3+0+2+0 = 5; invalidated 1+4+2+0 = 7; proposed = 5 + 7 = 12
    assert s["num_rounds"] == 4
    assert s["invalidated_tokens"] == 7
    assert s["proposed_tokens"] == 12
    # invalidation_rate = 7 / 12
    assert s["invalidation_rate"] == pytest.approx(7 / 12, rel=1e-12)
    # speculative rounds: r0 and r2 (r1 lost all drafts, r3 drafted none): R = 2, C = 2+0 = 2 -> 1 + 2/2 = 2.0
    assert s["mean_accept_length"] == pytest.approx(2.0, rel=1e-12)
    # fully invalidated: r1 only (r3 has 0 drafts but nothing invalidated)
    assert s["fully_invalidated_rounds"] == 1

    n = by_flag[False]
    # q2 + q3: rounds 3; drafts 4+4+4 = 12; invalidated 0 -> proposed 12, rate 0
    assert n["num_rounds"] == 3
    assert n["invalidated_tokens"] == 0
    assert n["proposed_tokens"] == 12
    assert n["invalidation_rate"] == 0.0
    # R = 3, C = 4+1+3 = 8 -> 1 + 8/3
    assert n["mean_accept_length"] == pytest.approx(1 + 8 / 3, rel=1e-12)
    assert n["fully_invalidated_rounds"] == 0

    d = one(ws, "select * from accept_length where deployment_id = 'spec'")
    # 7 rounds; the fully invalidated round (0 drafts) is not speculative: R = 2 + 3 = 5
    assert d["num_rounds"] == 7
    assert d["num_spec_rounds"] == 5
    assert d["num_invalidated_tokens"] == 7
    # invalidation_rate = 7 / (17 + 7) = 7/24 (drafts 5 + 12 = 17)
    assert d["num_draft_tokens"] == 17
    assert d["invalidation_rate"] == pytest.approx(7 / 24, rel=1e-12)
    # 1 + C/R = 1 + (2 + 8)/5 = 3.0 (counting the fully invalidated round would give 1 + 10/6)
    assert d["mean_accept_length"] == pytest.approx(3.0, rel=1e-12)


# --------------------------------------------------------------------------- 3. per-request macro average


def test_mean_accept_length_per_request_is_a_macro_average(load):
    ws = load(
        deployments=[deployment("spec", gamma=4), deployment("plain", method="ngram", gamma=3)],
        rounds=[
            # A: one round, K=4 -> 1 + 4/1 = 5.0
            round_row("spec", "A", 0, 4, 4),
            # B: four speculative rounds K = 1,0,1,0 and a plain round -> R_B = 4, C_B = 2 -> 1 + 2/4 = 1.5
            round_row("spec", "B", 0, 2, 1),
            round_row("spec", "B", 1, 2, 0),
            round_row("spec", "B", 2, 0, 0),
            round_row("spec", "B", 3, 2, 1),
            round_row("spec", "B", 4, 2, 0),
            # Z: only 0-draft rounds -> R_Z = 0, left out of the macro average
            round_row("spec", "Z", 0, 0, 0),
            round_row("spec", "Z", 1, 0, 0),
            # a deployment whose rounds never drafted
            round_row("plain", "P", 0, 0, 0),
        ],
    )
    got = one(ws, "select * from accept_length where deployment_id = 'spec'")
    # macro: (5.0 + 1.5) / 2 = 3.25 (including Z as 1.0 would give 2.5)
    assert got["mean_accept_length_per_request"] == pytest.approx(3.25, rel=1e-12)
    # micro: 1 + C/R = 1 + (4 + 2) / (1 + 4) = 2.2
    assert got["mean_accept_length"] == pytest.approx(2.2, rel=1e-12)
    plain = one(ws, "select * from accept_length where deployment_id = 'plain'")
    # no speculative round anywhere: R = 0, so both are null (not NaN)
    assert plain["num_spec_rounds"] == 0
    assert plain["mean_accept_length"] is None
    assert plain["mean_accept_length_per_request"] is None


# --------------------------------------------------------------------------- 4. prefill steps


def test_prefill_steps_are_left_out_of_speedup(load):
    ws = load(
        deployments=[deployment("spec", gamma=4), deployment("base", method="none")],
        steps=[
            # baseline: four decode steps of 10 ms at batch 1, and one prefill step of 100 ms
            step("base", 1, 10.0), step("base", 2, 10.0), step("base", 3, 10.0), step("base", 4, 10.0),
            step("base", 5, 100.0, num_prefill_tokens=300),
            # spec: three decode-only steps (one with num_prefill_tokens null -> 0), one prefill step
            step("spec", 1, 20.0, num_prefill_tokens=0),
            step("spec", 2, 30.0, num_prefill_tokens=0),
            step("spec", 3, 50.0, num_prefill_tokens=512),
            step("spec", 4, 16.0, num_prefill_tokens=None),
        ],
        rounds=[
            round_row("base", "b", 0, 0, 0, step_id=1),
            round_row("base", "b", 1, 0, 0, step_id=2),
            round_row("base", "b", 2, 0, 0, step_id=3),
            round_row("base", "b", 3, 0, 0, step_id=4),
            round_row("base", "b2", 0, 0, 0, step_id=5),
            round_row("spec", "r", 0, 4, 3, step_id=1),     # committed 4, 20 ms
            round_row("spec", "r", 1, 4, 1, step_id=2),     # committed 2, 30 ms
            round_row("spec", "r", 2, 4, 4, step_id=3),     # committed 5, 50 ms, prefill step
            round_row("spec", "r", 3, 2, 2, step_id=4),     # committed 3, 16 ms
            round_row("spec", "r", 4, 1, 0, step_id=None),  # committed 1, no step
        ],
    )
    assert rejected(ws) == []
    lift_floors(ws.con)        # a baseline of a few steps: this tests the definition
    # t0(1) = 40 ms / 4 tokens = 10 ms (with the prefill step it would be 140/5 = 28)
    # spec decode-only rounds at batch 1: committed 4+2+3 = 9, time 20+30+16 = 66
    # speedup = 10 · 9 / 66 = 90/66 (with the prefill round: 10 · 14 / 116)
    sp = one(ws, "select * from speedup where deployment_id = 'spec'")
    assert sp["baseline_id"] == "base"
    assert sp["speedup"] == pytest.approx(90 / 66, rel=1e-12)
    # coverage = 9 / all committed (4+2+5+3+1 = 15) = 0.6: the prefill round and the stepless
    # round count in the denominator only
    assert sp["speedup_coverage"] == pytest.approx(9 / 15, rel=1e-12)
    # round_ms mean over rounds with a clean step, prefill included: (20+30+50+16)/4 = 29
    assert sp["round_ms_mean"] == pytest.approx(29.0, rel=1e-12)
    # 1 of the 4 rounds with a step is in a prefill step
    assert sp["prefill_rounds"] == 1
    assert sp["rounds_with_step"] == 4
    assert sp["prefill_round_share"] == pytest.approx(0.25, rel=1e-12)

    b = one(ws, "select * from speedup_by_batch where deployment_id = 'spec'")
    assert b["batch_bucket"] == "1"
    assert b["num_rounds"] == 3                                      # the prefill round is out
    assert b["t0_ms"] == pytest.approx(10.0, rel=1e-12)
    assert b["tokens_per_round"] == pytest.approx(3.0, rel=1e-12)    # 9 / 3
    assert b["round_ms"] == pytest.approx(22.0, rel=1e-12)           # 66 / 3
    assert b["mean_accept_length"] == pytest.approx(3.0, rel=1e-12)  # 1 + (3+1+2)/3
    assert b["speedup"] == pytest.approx(90 / 66, rel=1e-12)
    assert b["condition_holds"] is True                              # 22 < 10 · 3 = 30


# --------------------------------------------------------------------------- 5. partial bucket coverage


def test_partial_bucket_coverage(load):
    ws = load(
        deployments=[deployment("spec", gamma=3), deployment("base", method="none")],
        steps=[
            step("base", 1, 10.0, batch_size=1), step("base", 2, 14.0, batch_size=1),
            step("spec", 1, 24.0, batch_size=1), step("spec", 2, 30.0, batch_size=1),
            step("spec", 3, 40.0, batch_size=6), step("spec", 4, 45.0, batch_size=8),
        ],
        rounds=[
            round_row("base", "b", 0, 0, 0, step_id=1),
            round_row("base", "b", 1, 0, 0, step_id=2),
            round_row("spec", "r1", 0, 3, 2, step_id=1),  # bucket 1, committed 3
            round_row("spec", "r1", 1, 3, 3, step_id=2),  # bucket 1, committed 4
            round_row("spec", "r2", 0, 3, 1, step_id=3),  # bucket 5-8, committed 2, 40 ms
            round_row("spec", "r3", 0, 3, 0, step_id=3),  # bucket 5-8, committed 1, 40 ms (same step)
            round_row("spec", "r2", 1, 3, 3, step_id=4),  # bucket 5-8, committed 4, 45 ms
        ],
    )
    assert rejected(ws) == []
    lift_floors(ws.con)        # a baseline of a few steps: this tests the definition
    # t0(1) = (10 + 14) / 2 = 12 ms. Bucket 1 of spec: committed 7, time 54.
    # speedup = 12 · 7 / 54 = 84/54, from bucket 1 only
    sp = one(ws, "select * from speedup where deployment_id = 'spec'")
    assert sp["speedup"] == pytest.approx(84 / 54, rel=1e-12)
    # coverage = 7 / (7 + 2 + 1 + 4) = 0.5
    assert sp["speedup_coverage"] == pytest.approx(0.5, rel=1e-12)

    by_bucket = {r["batch_bucket"]: r for r in rows(
        ws, "select * from speedup_by_batch where deployment_id = 'spec'")}
    assert set(by_bucket) == {"1", "5-8"}
    one_ = by_bucket["1"]
    assert one_["t0_ms"] == pytest.approx(12.0, rel=1e-12)
    assert one_["speedup"] == pytest.approx(84 / 54, rel=1e-12)
    assert one_["round_ms"] == pytest.approx(27.0, rel=1e-12)         # 54 / 2
    assert one_["tokens_per_round"] == pytest.approx(3.5, rel=1e-12)  # 7 / 2
    assert one_["condition_holds"] is True                            # 27 < 12 · 3.5 = 42
    high = by_bucket["5-8"]
    assert high["num_rounds"] == 3
    assert high["tokens_per_round"] == pytest.approx(7 / 3, rel=1e-12)       # (2+1+4)/3
    assert high["round_ms"] == pytest.approx(125 / 3, rel=1e-12)             # (40+40+45)/3
    assert high["mean_accept_length"] == pytest.approx(7 / 3, rel=1e-12)     # 1 + (1+0+3)/3
    # the baseline ran at batch 1 only (its one load cell, loads 1 to 1): batch 6 and 8 lie
    # above every load it measured, and nothing is extrapolated
    assert high["t0_ms"] is None
    assert high["speedup"] is None
    assert high["matched_share"] == 0
    assert high["t0_guard"] == "above_baseline_loads"
    assert high["condition_holds"] is None
    gone = one(ws, "select * from speedup_uncovered where deployment_id = 'spec'")
    assert (gone["batch_bucket"], gone["reason"]) == ("5-8", "above_baseline_loads")
    assert gone["committed_share"] == pytest.approx(0.5, rel=1e-12)             # (2 + 1 + 4) / 14
    assert (gone["min_batch_size"], gone["max_batch_size"]) == (6, 8)
    assert (gone["baseline_min_load"], gone["baseline_max_load"]) == (1, 1)


# --------------------------------------------------------------------------- 6. baseline rules


def test_matched_baseline_rules(load):
    ws = load(
        deployments=[
            # none deployments
            deployment("base_h100", method="none", model="m1", gpu="H100", tensor_parallel_size=1),
            deployment("base_h200", method="none", model="m1", gpu="H200"),
            deployment("base_other", method="none", model="m2"),
            deployment("base_q", method="none", model="m3", target_quant="bf16"),
            # rule 2: base_h100 matches gpu and tp; base_h200 has another gpu
            deployment("spec_h100", model="m1", gpu="H100", tensor_parallel_size=1),
            # rule 2: no gpu; tp 2 excludes base_h100 (tp 1); base_h200 has no tp -> base_h200
            deployment("spec_tp2", model="m1", tensor_parallel_size=2),
            # rule 2: neither gpu nor tp set -> both m1 baselines match -> none
            deployment("spec_any", model="m1"),
            # rule 2: fp8 does not match the (default bf16) m1 baselines -> none
            deployment("spec_fp8", model="m1", target_quant="fp8", gpu="H100", tensor_parallel_size=1),
            # rule 1: explicit none deployment, other model -> used
            deployment("spec_explicit", model="m1", baseline_id="base_other"),
            # rule 1: explicit, but names a speculative deployment -> none (rule 2 would give base_h100)
            deployment("spec_bad", model="m1", gpu="H100", tensor_parallel_size=1, baseline_id="spec_h100"),
            # rule 1: explicit, names no deployment -> none (rule 2 would give base_h100)
            deployment("spec_unknown", model="m1", gpu="H100", tensor_parallel_size=1, baseline_id="nope"),
            # rule 2 with target_quant null on D (default bf16) and bf16 written out on the baseline
            deployment("spec_q", model="m3"),
            deployment("spec_q8", model="m3", target_quant="fp8"),
        ],
        rounds=[round_row("spec_h100", "r", 0, 2, 1)],
    )
    assert rejected(ws) == []
    expected = {
        "base_h100": None, "base_h200": None, "base_other": None, "base_q": None,
        "spec_h100": "base_h100",
        "spec_tp2": "base_h200",
        "spec_any": None,
        "spec_fp8": None,
        "spec_explicit": "base_other",
        "spec_bad": None,
        "spec_unknown": None,
        "spec_q": "base_q",
        "spec_q8": None,
    }
    matched = {r["deployment_id"]: r for r in rows(ws, "select * from matched_baseline")}
    assert {k: v["baseline_id"] for k, v in matched.items()} == expected
    speedup = {r["deployment_id"]: r for r in rows(ws, "select * from speedup")}
    assert {k: v["baseline_id"] for k, v in speedup.items()} == expected
    # a speculative deployment without a baseline says why
    for dep in ("spec_any", "spec_fp8", "spec_bad", "spec_unknown", "spec_q8"):
        assert matched[dep]["baseline_note"], dep
        assert speedup[dep]["speedup_note"], dep
        assert speedup[dep]["speedup"] is None
        assert speedup[dep]["speedup_coverage"] is None
    for dep in ("spec_h100", "spec_tp2", "spec_explicit", "spec_q"):
        assert matched[dep]["baseline_note"] is None, dep
    # the explicit notes name the declared id
    assert "nope" in matched["spec_unknown"]["baseline_note"]
    assert "spec_h100" in matched["spec_bad"]["baseline_note"]


# --------------------------------------------------------------------------- 7. latency percentiles

# (arrival, first token, finish, output_tokens) in ms, irregular on purpose
LATENCY_REQUESTS = [
    (0.0, 113.25, 1840.5, 57),
    (12.5, 98.0, 603.125, 21),
    (40.0, 402.75, 5230.0, 311),
    (55.125, 160.0, 161.0, 2),
    (71.0, 85.5, 85.5, 1),          # one token: no tpot
    (90.0, 1290.0, 9001.75, 400),
    (104.5, 230.0, 2004.25, 88),
    (130.0, 131.0, 977.0, 45),
    (166.75, 320.5, 330.5, 3),
    (200.0, 250.0, 1250.0, 101),
    (215.5, 999.0, 1003.0, 1),      # one token: no tpot
    (230.0, 275.25, 3912.0, 177),
    (260.0, 305.0, 7400.5, 512),
    (290.25, 720.0, 1900.0, 33),
    (333.0, 345.5, 760.0, 19),
    (350.0, 2150.0, 2950.0, 12),
    (401.0, 470.0, 4470.0, 256),
    (455.5, 520.75, 611.0, 6),
    (500.0, 589.0, 3589.0, 150),
    (612.0, 700.0, 1200.5, 40),
]


def test_latency_percentiles_match_numpy(load):
    reqs = [request("spec", f"r{i}", arrival=a, first=f, finish=e, output_tokens=n)
            for i, (a, f, e, n) in enumerate(LATENCY_REQUESTS)]
    reqs += [
        # failed before the first token: e2el known, ttft and tpot unknown
        request("spec", "failed", arrival=20.0, first=None, finish=2620.0, output_tokens=0, finish_reason="error"),
        # rejected by time_order: the first token before arrival / finish before first token
        request("spec", "bad1", arrival=500.0, first=400.0, finish=90000.0, output_tokens=50),
        request("spec", "bad2", arrival=0.0, first=80000.0, finish=70000.0, output_tokens=50),
    ]
    ws = load(
        deployments=[deployment("spec")],
        requests=reqs,
        rounds=[round_row("spec", "r0", 0, 4, 2)],
    )
    assert rejected(ws) == [("requests", "deployment_id=spec, request_id=bad1", "time_order"),
                            ("requests", "deployment_id=spec, request_id=bad2", "time_order")]
    ttft = [f - a for a, f, e, n in LATENCY_REQUESTS]
    e2el = [e - a for a, f, e, n in LATENCY_REQUESTS] + [2620.0 - 20.0]
    tpot = [(e - f) / (n - 1) for a, f, e, n in LATENCY_REQUESTS if n > 1]
    assert len(tpot) == 18
    got = {r["metric"]: r for r in rows(ws, "select * from latency where deployment_id = 'spec'")}
    for metric, values in (("ttft", ttft), ("tpot", tpot), ("e2el", e2el)):
        values = np.array(values)
        r = got[metric]
        assert r["n"] == len(values), metric
        assert r["mean"] == pytest.approx(values.mean(), rel=1e-9), metric
        for p in (50, 90, 95, 99):
            assert r[f"p{p}"] == pytest.approx(np.percentile(values, p), rel=1e-9), (metric, p)
        assert r["max"] == pytest.approx(values.max(), rel=1e-9), metric
    # no emission after the first token has a time (the only round has no step): no gaps
    assert got["itl"]["n"] == 0
    assert got["itl"]["mean"] is None and got["itl"]["p50"] is None and got["itl"]["max"] is None


# --------------------------------------------------------------------------- 8. itl and max_stall


def test_itl_from_round_end_times(load):
    ws = load(
        deployments=[deployment("spec", gamma=2)],
        requests=[
            request("spec", "a", arrival=0.0, first=100.0, finish=400.0, output_tokens=9),
            request("spec", "b", arrival=0.0, first=50.0, finish=200.0, output_tokens=7),
            request("spec", "c", arrival=0.0, first=None, finish=100.0, output_tokens=4),
            # rejected (time_order): its rounds stay for acceptance, but not for itl
            request("spec", "d", arrival=500.0, first=400.0, finish=800.0, output_tokens=4),
        ],
        steps=[
            step("spec", 1, 20.0, start_ms=110.0),     # ends 130
            step("spec", 2, 25.5, start_ms=140.0),     # ends 165.5
            step("spec", 3, 12.25, start_ms=250.0),    # ends 262.25
            step("spec", 4, 10.0, start_ms=300.0),     # ends 310 (its round commits nothing)
            step("spec", 5, 15.0, start_ms=60.0),      # ends 75
            step("spec", 6, 10.0, start_ms=80.0, verify_ms=-1.0),  # rejected: negative_duration
            step("spec", 7, 8.0, start_ms=100.0),      # ends 108
            step("spec", 8, 5.0, start_ms=20.0),       # ends 25
            step("spec", 9, 7.5, start_ms=40.0),       # ends 47.5
            step("spec", 10, 5.0, start_ms=510.0),     # ends 515
            step("spec", 11, 100.0, start_ms=600.0),   # ends 700
        ],
        rounds=[
            # a: first token at 100, then 130, 165.5, (no step), 262.25, (commits 0)
            round_row("spec", "a", 0, 2, 1, step_id=1, stop_reason=None),
            round_row("spec", "a", 1, 2, 2, step_id=2, stop_reason=None),
            round_row("spec", "a", 2, 2, 0, step_id=None, stop_reason=None),
            round_row("spec", "a", 3, 2, 1, step_id=3, stop_reason=None),
            round_row("spec", "a", 4, 2, 0, 0, step_id=4, stop_reason="eos"),
            # b: first token at 50, then 75, (rejected step), 108
            round_row("spec", "b", 0, 0, 0, step_id=5, stop_reason=None),
            round_row("spec", "b", 1, 2, 1, step_id=6, stop_reason=None),
            round_row("spec", "b", 2, 2, 2, step_id=7, stop_reason=None),
            # c: no first_token_time; emissions 25 and 47.5
            round_row("spec", "c", 0, 1, 0, step_id=8, stop_reason=None),
            round_row("spec", "c", 1, 2, 0, step_id=9, stop_reason=None),
            # d: rejected request; would add the gap 700 - 515 = 185
            round_row("spec", "d", 0, 2, 1, step_id=10, stop_reason=None),
            round_row("spec", "d", 1, 2, 1, step_id=11, stop_reason=None),
        ],
    )
    assert rejected(ws) == [("requests", "deployment_id=spec, request_id=d", "time_order"),
                            ("steps", "deployment_id=spec, step_id=6", "negative_duration")]
    gaps = ws.con.execute(
        "select q.request_id, g.gap_ms from itl_gaps as g join requests as q using (request_uid) "
        "order by q.request_id, g.round_idx").fetchall()
    # a: 130-100 = 30, 165.5-130 = 35.5, 262.25-165.5 = 96.75
    # b: 75-50 = 25, 108-75 = 33
    # c: 47.5-25 = 22.5
    assert gaps == [("a", pytest.approx(30.0)), ("a", pytest.approx(35.5)), ("a", pytest.approx(96.75)),
                    ("b", pytest.approx(25.0)), ("b", pytest.approx(33.0)),
                    ("c", pytest.approx(22.5))]
    got = {r["metric"]: r for r in rows(ws, "select * from latency where deployment_id = 'spec'")}
    itl = got["itl"]
    # pooled gaps sorted: 22.5, 25, 30, 33, 35.5, 96.75 (n = 6, linear positions p·5)
    assert itl["n"] == 6
    assert itl["mean"] == pytest.approx(242.75 / 6)           # 30+35.5+96.75+25+33+22.5 = 242.75
    assert itl["p50"] == pytest.approx(31.5)                  # pos 2.5: 30 + 0.5·3
    assert itl["p90"] == pytest.approx(66.125)                # pos 4.5: 35.5 + 0.5·61.25
    assert itl["p95"] == pytest.approx(81.4375)               # pos 4.75: 35.5 + 0.75·61.25
    assert itl["p99"] == pytest.approx(93.6875)               # pos 4.95: 35.5 + 0.95·61.25
    assert itl["max"] == pytest.approx(96.75)
    stall = got["max_stall"]
    # per request: a 96.75, b 33, c 22.5 -> sorted 22.5, 33, 96.75 (linear positions p·2)
    assert stall["n"] == 3
    assert stall["mean"] == pytest.approx(152.25 / 3)         # 50.75
    assert stall["p50"] == pytest.approx(33.0)                # pos 1
    assert stall["p90"] == pytest.approx(84.0)                # pos 1.8: 33 + 0.8·63.75
    assert stall["p95"] == pytest.approx(90.375)              # pos 1.9: 33 + 0.9·63.75
    assert stall["p99"] == pytest.approx(95.475)              # pos 1.98: 33 + 0.98·63.75
    assert stall["max"] == pytest.approx(96.75)
    # the rejected request's rounds still count toward acceptance: 12 rounds in all
    assert one(ws, "select num_rounds from accept_length where deployment_id = 'spec'")["num_rounds"] == 12


# --------------------------------------------------------------------------- 9. context buckets


def test_speedup_by_context_matches_t0_on_batch_and_context(load):
    """Each decode step gets the baseline's time per token at its own batch size and context:
    t0(b, X) = f(cell) + κ · X, κ the baseline's slope of time per token on X (the context
    tokens in the batch) pooled within its load cells; a step outside the contexts the
    baseline held there (widened by context_margin, 25 %) is left out. A step falls in the
    context bucket of its mean context per request; the acceptance columns count rounds by
    their own context_len."""
    ws = load(
        deployments=[deployment("spec", gamma=3), deployment("base", method="none")],
        steps=[
            step("base", 1, 10.0, batch_size=1), step("base", 2, 10.0, batch_size=1),
            step("base", 3, 20.0, batch_size=1), step("base", 4, 20.0, batch_size=1),
            step("base", 5, 16.0, batch_size=2), step("base", 6, 36.0, batch_size=2),
            step("spec", 1, 15.0, batch_size=1), step("spec", 2, 12.0, batch_size=1),
            step("spec", 3, 30.0, batch_size=1), step("spec", 4, 20.0, batch_size=2),
            step("spec", 5, 20.0, batch_size=1),
        ],
        rounds=[
            # baseline cell 1 (4 steps of 1 token): X = 1000 → 10 ms, X = 3000 → 20 ms.
            #   t0 = 60/4 = 15, X̄ = 8000/4 = 2000; Sxy = Σ time·X − tx·time/tokens
            #   = 140,000 − 8000·60/4 = 20,000; Sxx = Σ X² − tx²/tokens = 20e6 − 16e6 = 4e6
            round_row("base", "x", 0, 0, 0, step_id=1, context_len=1000),
            round_row("base", "x", 1, 0, 0, step_id=2, context_len=1000),
            round_row("base", "y", 0, 0, 0, step_id=3, context_len=3000),
            round_row("base", "y", 1, 0, 0, step_id=4, context_len=3000),
            # baseline cell 2 (2 steps of 2 rounds, time = 2 · duration): X = 2000 → 32 ms for
            #   2 tokens, X = 6000 → 72 ms. t0 = 104/4 = 26, X̄ = 16000/4 = 4000;
            #   Sxy = (32·2000 + 72·6000) − 16000·104/4 = 496,000 − 416,000 = 80,000;
            #   Sxx = (2·2000² + 2·6000²) − 16000²/4 = 80e6 − 64e6 = 16e6
            round_row("base", "x", 2, 0, 0, step_id=5, context_len=1000),
            round_row("base", "z", 0, 0, 0, step_id=5, context_len=1000),
            round_row("base", "y", 2, 0, 0, step_id=6, context_len=3000),
            round_row("base", "z", 1, 0, 0, step_id=6, context_len=3000),
            # κ = (20,000 + 80,000) / (4e6 + 16e6) = 0.005 ms per context token;
            # f(1) = 15 − 0.005·2000 = 5, f(2) = 26 − 0.005·4000 = 6: t0(1, X) = 5 + 0.005·X,
            # t0(2, X) = 6 + 0.005·X. Both cells held 1000 to 3000 tokens per request:
            # matched from 1000/1.25 = 800 to 3000·1.25 = 3750.
            # spec                                                                  counterfactual
            round_row("spec", "p", 0, 3, 2, step_id=1, context_len=1000),   # 0-1k,  c 3, 15 ms: 3·10 = 30
            round_row("spec", "p", 1, 3, 1, step_id=2, context_len=1500),   # 1k-2k, c 2, 12 ms: 2·12.5 = 25
            round_row("spec", "p", 2, 2, 0, step_id=3, context_len=3500),   # 2k-4k, c 1, 30 ms: 1·22.5 = 22.5
            # one step of 2 requests, X = 2047, 1023.5 a request (step bucket 0-1k): c 6, 2·20 = 40 ms,
            # 6 · t0(2, 2047) = 6 · (6 + 10.235) = 97.41
            round_row("spec", "s", 0, 3, 3, step_id=4, context_len=1024),   # round bucket 1k-2k, c 4
            round_row("spec", "t", 0, 3, 1, step_id=4, context_len=1023),   # round bucket 0-1k,  c 2
            round_row("spec", "q", 0, 3, 1, step_id=5, context_len=3800),   # 2k-4k, c 2, 20 ms: 3800 > 3750, left out
        ],
    )
    assert rejected(ws) == []
    lift_floors(ws.con)        # a baseline of a few steps: this tests the definition
    got = {r["context_bucket"]: r for r in rows(
        ws, "select * from speedup_by_context where deployment_id = 'spec'")}
    assert set(got) == {"0-1k", "1k-2k", "2k-4k"}

    low = got["0-1k"]
    # rounds by their own context: (p,0) and (t,0): c 3 + 2, 15 + 20 ms
    assert low["num_rounds"] == 2
    assert low["mean_accept_length"] == pytest.approx(2.5)   # 1 + (2+1)/2
    assert low["tokens_per_round"] == pytest.approx(2.5)     # 5/2
    assert low["round_ms"] == pytest.approx(17.5)            # 35/2
    # steps by their mean context: spec 1 and spec 4: (30 + 97.41) over c 3 + 6 and 15 + 40 ms
    assert low["t0_ms"] == pytest.approx(127.41 / 9, rel=1e-12)      # 14.157
    assert low["speedup"] == pytest.approx(127.41 / 55, rel=1e-12)
    assert low["condition_holds"] is True                    # matched: 55 < 127.41 (speedup 2.32)

    mid = got["1k-2k"]
    # rounds (p,1) and (s,0): c 2 + 4, 12 + 20 ms; steps: spec 2 only, at 1500 tokens where the
    # baseline never ran but between what it held: t0(1, 1500) = 5 + 7.5 = 12.5
    assert mid["num_rounds"] == 2
    assert mid["mean_accept_length"] == pytest.approx(3.0)   # 1 + (1+3)/2
    assert mid["tokens_per_round"] == pytest.approx(3.0)     # 6/2
    assert mid["round_ms"] == pytest.approx(16.0)            # 32/2
    assert mid["t0_ms"] == pytest.approx(12.5, rel=1e-12)
    assert mid["speedup"] == pytest.approx(25 / 12, rel=1e-12)
    assert mid["condition_holds"] is True                    # matched: 12 < 25 (speedup 2.08)

    high = got["2k-4k"]
    # rounds (p,2) and (q,0): c 1 + 2, 30 + 20 ms; matched: spec 3 alone, t0(1, 3500) = 22.5
    # (the batch cell's own t0 would be 15)
    assert high["num_rounds"] == 2
    assert high["mean_accept_length"] == pytest.approx(1.5)  # 1 + (0+1)/2
    assert high["t0_ms"] == pytest.approx(22.5, rel=1e-12)
    assert high["speedup"] == pytest.approx(22.5 / 30, rel=1e-12)
    assert high["round_ms"] == pytest.approx(25.0)           # 50/2
    assert high["tokens_per_round"] == pytest.approx(1.5)    # 3/2
    # the condition over the matched step, where t0 is measured: 30 < 22.5 · 1 fails (speedup 0.75);
    # over all its rounds, spec 5's unmatched one included, 25 < 22.5 · 1.5 would have said it holds
    assert high["condition_holds"] is False
    cell = one(ws, "select t0_match, matched_share from speedup_by_batch_context "
                   "where deployment_id = 'spec' and batch_bucket = '1' and context_bucket = '2k-4k'")
    assert cell["t0_match"] == "context"
    assert cell["matched_share"] == pytest.approx(1 / 3, rel=1e-12)  # c 1 of 1 + 2

    # the headline: cf 30 + 25 + 22.5 + 97.41 = 174.91 over 15 + 12 + 30 + 40 = 97 ms;
    # coverage 12 of 14 committed tokens (spec 5's 2 are out of the baseline's contexts)
    sp = one(ws, "select * from speedup where deployment_id = 'spec'")
    assert sp["speedup"] == pytest.approx(174.91 / 97, rel=1e-12)
    assert sp["speedup_coverage"] == pytest.approx(12 / 14, rel=1e-12)
    gone = one(ws, "select * from speedup_uncovered where deployment_id = 'spec'")
    assert (gone["batch_bucket"], gone["reason"]) == ("1", "context_out_of_range")
    assert gone["committed_share"] == pytest.approx(2 / 14, rel=1e-12)
    assert (gone["min_context"], gone["max_context"]) == (pytest.approx(3800), pytest.approx(3800))


# --------------------------------------------------------------------------- 10. capacity


def test_capacity(load):
    ws = load(
        deployments=[deployment("spec", gamma=4, kv_capacity_tokens=1000, tensor_parallel_size=2),
                     deployment("base", method="none")],
        requests=[
            request("spec", "r1", arrival=0.0, first=50.0, finish=1000.0, output_tokens=10,
                    finish_reason="stop", num_preemptions=1),
            request("spec", "r2", arrival=200.0, first=300.0, finish=2500.0, output_tokens=30,
                    finish_reason="length", num_preemptions=None),  # default 0
            request("spec", "r3", arrival=100.0, first=None, finish=None, output_tokens=0,
                    finish_reason="error", num_preemptions=2),
            request("spec", "r4", arrival=300.0, first=400.0, finish=1500.0, output_tokens=5,
                    finish_reason="abort", num_preemptions=0),
            request("base", "b1", arrival=0.0, first=10.0, finish=500.0, output_tokens=8, num_preemptions=0),
        ],
        steps=[
            step("spec", 1, 10.0, batch_size=2, kv_usage=0.2),
            step("spec", 2, 10.0, batch_size=3, kv_usage=0.5),
            step("spec", 3, 10.0, batch_size=1, kv_usage=0.35),   # no rounds in the trace
            step("base", 1, 10.0, kv_usage=0.9),
        ],
        rounds=[
            round_row("spec", "r1", 0, 4, 0, step_id=1),
            round_row("spec", "r2", 0, 3, 0, step_id=1),
            round_row("spec", "r1", 1, 2, 0, step_id=2),
            round_row("spec", "r2", 1, 0, 0, step_id=2),
            round_row("spec", "r4", 0, 1, 0, step_id=2),
            round_row("spec", "r4", 1, 4, 0, step_id=None),       # in no step
            round_row("base", "b1", 0, 0, 0, step_id=1),
        ],
    )
    assert rejected(ws) == []
    c = one(ws, "select * from capacity where deployment_id = 'spec'")
    assert c["completed_requests"] == 2                                   # r1 stop, r2 length
    assert c["failed_requests"] == 2                                      # r3 error, r4 abort
    assert c["preemptions_per_request"] == pytest.approx(0.75)            # (1+0+2+0)/4
    assert c["kv_usage_mean"] == pytest.approx(1.05 / 3)                  # (0.2+0.5+0.35)/3
    assert c["kv_usage_max"] == pytest.approx(0.5)
    # drafts per step: 4+3 = 7, 2+0+1 = 3, 0 -> mean of 7/1000, 3/1000, 0 = 10/3000
    assert c["candidate_kv_share"] == pytest.approx(10 / 3000)
    # 45 tokens over 2500 ms (min arrival 0, max finish 2500) = 18 tokens/s
    assert c["output_tokens_per_s"] == pytest.approx(18.0)
    b = one(ws, "select * from capacity where deployment_id = 'base'")
    assert b["completed_requests"] == 1 and b["failed_requests"] == 0
    assert b["preemptions_per_request"] == 0.0
    assert b["kv_usage_mean"] == pytest.approx(0.9)
    assert b["candidate_kv_share"] is None                               # kv_capacity_tokens unknown
    assert b["output_tokens_per_s"] == pytest.approx(16.0)                # 8 / 0.5 s
    # busy time: the 3 clean steps' 30 ms; committed by their rounds: 1+1 (step 1) + 1+1+1 (step 2)
    # = 5 tokens (r4's round in no step does not count) -> 5 / 0.03 s
    assert c["output_tokens_per_busy_s"] == pytest.approx(5 / 0.03)
    assert c["peak_hour_output_tokens_per_s"] == pytest.approx(5 / 3600)   # every step starts in one hour
    assert b["output_tokens_per_busy_s"] == pytest.approx(1 / 0.01)
    by_batch = rows(ws, "select * exclude (bucket_min) from capacity_by_batch where deployment_id = 'spec' "
                        "order by bucket_min")
    # one 10 ms step per bucket: batch 1 (step 3, no rounds), 2 (step 1, 2 tokens), 3-4 (step 2, 3 tokens);
    # tensor_parallel_size 2 halves the rate per GPU
    assert by_batch == [
        {"deployment_id": "spec", "batch_bucket": "1", "num_steps": 1, "busy_s": pytest.approx(0.01),
         "num_committed_tokens": 0, "output_tokens_per_busy_s": 0.0, "num_gpus": 2,
         "output_tokens_per_gpu_s": 0.0, "time_share": pytest.approx(1 / 3)},
        {"deployment_id": "spec", "batch_bucket": "2", "num_steps": 1, "busy_s": pytest.approx(0.01),
         "num_committed_tokens": 2, "output_tokens_per_busy_s": pytest.approx(200.0), "num_gpus": 2,
         "output_tokens_per_gpu_s": pytest.approx(100.0), "time_share": pytest.approx(1 / 3)},
        {"deployment_id": "spec", "batch_bucket": "3-4", "num_steps": 1, "busy_s": pytest.approx(0.01),
         "num_committed_tokens": 3, "output_tokens_per_busy_s": pytest.approx(300.0), "num_gpus": 2,
         "output_tokens_per_gpu_s": pytest.approx(150.0), "time_share": pytest.approx(1 / 3)},
    ]
    base_bucket = one(ws, "select * from capacity_by_batch where deployment_id = 'base'")
    assert base_bucket["num_gpus"] is None and base_bucket["output_tokens_per_gpu_s"] is None


def test_preemptions_unknown_without_the_column(load):
    ws = load(
        deployments=[deployment("spec")],
        requests=[request("spec", "r1"), request("spec", "r2")],
        rounds=[round_row("spec", "r1", 0, 2, 1)],
    )
    c = one(ws, "select * from capacity where deployment_id = 'spec'")
    assert c["preemptions_per_request"] is None   # absent from every requests file: unknown, not 0
    assert c["completed_requests"] == 2


def test_preemptions_default_when_the_column_is_in_some_files(tmp_path):
    root = tmp_path / "t"
    write_traces(root, deployments=[deployment("spec")], rounds=[round_row("spec", "r1", 0, 2, 1)])
    write_table(root, "requests", {
        "date=2026-11-27": [request("spec", "r1", num_preemptions=2), request("spec", "r2", num_preemptions=1)],
        "date=2026-11-28": [request("spec", "r3"), request("spec", "r4")],   # no num_preemptions column
    })
    ws = api.open_traces(root)
    try:
        c = one(ws, "select * from capacity where deployment_id = 'spec'")
        # (2 + 1 + 0 + 0) / 4
        assert c["preemptions_per_request"] == pytest.approx(0.75)
    finally:
        ws.close()


# --------------------------------------------------------------------------- 11. temperature


def test_temperature_buckets(load):
    ws = load(
        deployments=[deployment("spec", gamma=4)],
        requests=[
            request("spec", "q0", temperature=0.0),
            request("spec", "q025", temperature=0.25),
            request("spec", "q05", temperature=0.5),
            request("spec", "q07", temperature=0.7),
            request("spec", "q1", temperature=1.0),
            request("spec", "q13", temperature=1.3),
            request("spec", "qn", temperature=None),
            # rejected (time_order): its rounds have no clean request row -> unknown
            request("spec", "qr", arrival=100.0, first=50.0, temperature=0.2),
        ],
        rounds=[
            round_row("spec", "q0", 0, 4, 4), round_row("spec", "q0", 1, 4, 2),
            round_row("spec", "q025", 0, 4, 1),
            round_row("spec", "q05", 0, 4, 3),
            round_row("spec", "q07", 0, 4, 0),
            round_row("spec", "q1", 0, 2, 2),
            round_row("spec", "q13", 0, 4, 1), round_row("spec", "q13", 1, 0, 0),
            round_row("spec", "qn", 0, 3, 3),
            round_row("spec", "qr", 0, 3, 0),
        ],
    )
    assert rejected(ws) == [("requests", "deployment_id=spec, request_id=qr", "time_order")]
    got = {r["temperature_bucket"]: r for r in rows(
        ws, "select * from accept_length_by_temperature where deployment_id = 'spec'")}
    assert set(got) == {"0", "(0,0.5]", "(0.5,1]", ">1", "unknown"}
    # bucket: (requests, rounds, R, drafts, C, committed)
    #   0        : q0            -> 1, 2, 2, 8, 6, 8
    #   (0,0.5]  : q025, q05     -> 2, 2, 2, 8, 4, 6
    #   (0.5,1]  : q07, q1       -> 2, 2, 2, 6, 2, 4
    #   >1       : q13           -> 1, 2, 1, 4, 1, 3
    #   unknown  : qn, qr        -> 2, 2, 2, 6, 3, 5
    expected = {
        "0": (1, 2, 2, 8, 6, 8),
        "(0,0.5]": (2, 2, 2, 8, 4, 6),
        "(0.5,1]": (2, 2, 2, 6, 2, 4),
        ">1": (1, 2, 1, 4, 1, 3),
        "unknown": (2, 2, 2, 6, 3, 5),
    }
    for bucket, (nreq, nrounds, r, drafts, c, committed) in expected.items():
        g = got[bucket]
        assert (g["num_requests"], g["num_rounds"], g["num_spec_rounds"], g["num_draft_tokens"],
                g["num_accepted_tokens"], g["num_committed_tokens"]) == (nreq, nrounds, r, drafts, c, committed), bucket
        assert g["mean_accept_length"] == pytest.approx(1 + c / r), bucket
        assert g["acceptance_rate"] == pytest.approx(c / drafts), bucket
        assert g["tokens_per_round"] == pytest.approx(committed / nrounds), bucket
    # mean accept lengths: 0 -> 4.0, (0,0.5] -> 3.0, (0.5,1] -> 2.0, >1 -> 2.0, unknown -> 2.5
    assert [round(got[b]["mean_accept_length"], 12) for b in expected] == [4.0, 3.0, 2.0, 2.0, 2.5]


# --------------------------------------------------------------------------- 12. trees


def test_tree_nodes_default_to_drafts(tmp_path):
    root = tmp_path / "t"
    write_traces(root, deployments=[deployment("tree", gamma=4)])
    write_table(root, "rounds", {
        "date=2026-11-27": [
            round_row("tree", "a", 0, 4, 3, num_verified_nodes=10),
            round_row("tree", "a", 1, 4, 1, num_verified_nodes=None),   # default 4
            round_row("tree", "a", 2, 0, 0, num_verified_nodes=None),   # default 0
            round_row("tree", "a", 3, 2, 2, num_verified_nodes=6),
        ],
        "date=2026-11-28": [                                             # no num_verified_nodes column
            round_row("tree", "b", 0, 3, 3),                             # default 3
            round_row("tree", "b", 1, 3, 0),                             # default 3
        ],
    })
    ws = api.open_traces(root)
    try:
        assert rejected(ws) == []
        got = one(ws, "select * from accept_length where deployment_id = 'tree'")
        # Σ nodes = 10 + 4 + 0 + 6 + 3 + 3 = 26; R = 3 + 2 = 5; C = 3+1+0+2+3+0 = 9
        assert got["num_spec_rounds"] == 5
        assert got["num_accepted_tokens"] == 9
        assert got["nodes_per_round"] == pytest.approx(26 / 5)     # 5.2
        assert got["accepted_per_node"] == pytest.approx(9 / 26)
        assert got["mean_accept_length"] == pytest.approx(2.8)     # 1 + 9/5
    finally:
        ws.close()


def test_the_peak_hour_is_the_busiest_clock_hour_and_ties_take_the_earliest(load):
    # hour 12: steps committing 3 + 2 = 5 tokens; hour 13: 5 tokens too (a tie: 12 is reported);
    # hour 14: 4 tokens. At 12:00 + 30 min etc.
    minutes = 60_000.0
    ws = load(
        deployments=[deployment("spec")],
        steps=[step("spec", 1, start_ms=0.0), step("spec", 2, start_ms=30 * minutes),
               step("spec", 3, start_ms=61 * minutes), step("spec", 4, start_ms=125 * minutes)],
        rounds=[round_row("spec", "r1", 0, 4, 2, step_id=1),                   # 3 tokens
                round_row("spec", "r1", 1, 4, 1, step_id=2),                   # 2 tokens
                round_row("spec", "r2", 0, 4, 4, step_id=3),                   # 5 tokens
                round_row("spec", "r3", 0, 4, 3, step_id=4)],                  # 4 tokens
    )
    c = one(ws, "select peak_hour, peak_hour_output_tokens_per_s from capacity")
    assert c["peak_hour_output_tokens_per_s"] == pytest.approx(5 / 3600)
    assert c["peak_hour"].replace(tzinfo=None) == at(0).replace(tzinfo=None, minute=0, second=0)
