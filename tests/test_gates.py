"""analyzer.gates: the four deployment gates (docs/commands.md "Gates", seed 8.2) on tiny traces.

Every expected value is worked out by hand in the comment next to it. Latency
percentiles use numpy's default (linear) percentile as the oracle, as
docs/metrics.md says.
"""

from __future__ import annotations

import numpy as np
import pytest

from analyzer import api
from analyzer.analysis.config import Config, parse_config
from analyzer.decide.gates import blocking_checks, evaluate_gates
from analyzer.render.gates import render_gates_markdown
from tracebuilder import at, deployment, round_row, write_table, write_traces, request, step

# --------------------------------------------------------------------------- builders






# These tiny traces have a handful of requests: the tests of what a check compares lift the
# [evidence] min_requests floor (test_few_requests_decide_nothing tests the floor itself).
FEW = "[evidence]\nmin_requests = 1\n"


def config(text: str = "") -> Config:
    import tomllib
    return parse_config(tomllib.loads(text if "[evidence]" in text else FEW + text), source="test.toml")


@pytest.fixture
def gates_of(tmp_path):
    """gates_of(config, deployments=[...], ...) -> {(deployment_id, gate): gate dict}."""
    counter = [0]

    def _gates(cfg: Config | None = None, evidence: dict | None = None, **tables) -> dict:
        root = tmp_path / f"traces{counter[0]}"
        counter[0] += 1
        write_traces(root, **tables)
        ws = api.open_traces(root)
        try:
            assert ws.con.execute("select count(*) from rejected_rows").fetchone()[0] == 0
            result = evaluate_gates(ws.con, cfg or config(), evidence)
        finally:
            ws.close()
        return {(g["deployment_id"], g["gate"]): g for g in result}

    return _gates


def check(gate: dict, name: str) -> dict:
    found = [c for c in gate["checks"] if c["name"] == name]
    assert len(found) == 1, gate
    return found[0]


BASE = deployment("base", method="none")

# --------------------------------------------------------------------------- correctness


def test_correctness_pass_fail_unknown(gates_of):
    g = gates_of(
        deployments=[BASE, deployment("allok"), deployment("onebad"), deployment("allnull")],
        requests=[
            request("base", "b1", matches_reference=True),
            # 3 of 4 match: 0.75 < 1.0
            *[request("onebad", f"r{i}", matches_reference=v) for i, v in enumerate([True, True, False, True])],
            # 2 of 2 non-null match (the null one is not counted): 1.0
            request("allok", "r1", matches_reference=True), request("allok", "r2", matches_reference=None),
            request("allok", "r3", matches_reference=True),
            # no non-null value
            request("allnull", "r1", matches_reference=None), request("allnull", "r2", matches_reference=None),
        ],
        rounds=[round_row("base", "b1", 0, 0, 0)],
    )
    bad = g[("onebad", "correctness")]
    assert bad["status"] == "fail"
    assert check(bad, "match_rate") == {"name": "match_rate", "value": 0.75, "threshold": 1.0,
                                        "baseline_value": None, "status": "fail", "reason": None}
    ok = g[("allok", "correctness")]
    assert ok["status"] == "pass" and check(ok, "match_rate")["value"] == 1.0
    assert ok["reason"] is None
    null = g[("allnull", "correctness")]
    assert null["status"] == "unknown"
    assert check(null, "match_rate")["value"] is None
    assert "matches_reference is null for every request" in null["reason"]
    # the baseline is the reference itself: not gated on correctness
    assert ("base", "correctness") not in g


def test_correctness_threshold_from_config(gates_of):
    tables = dict(
        deployments=[deployment("spec")],
        requests=[request("spec", f"r{i}", matches_reference=v) for i, v in enumerate([True, True, False, True])],
        rounds=[round_row("spec", "r0", 0, 2, 1)],
    )
    # 0.75 >= 0.75: thresholds are inclusive
    assert check(gates_of(config("[gates.correctness]\nmin_match_rate = 0.75"), **tables)[
        ("spec", "correctness")], "match_rate")["status"] == "pass"
    assert gates_of(config("[gates.correctness]\nmin_match_rate = 0.8"), **tables)[
        ("spec", "correctness")]["status"] == "fail"


def test_correctness_unknown_when_the_column_is_absent_from_every_file(gates_of):
    g = gates_of(deployments=[deployment("spec")], requests=[request("spec", "r1")],
                 rounds=[round_row("spec", "r1", 0, 2, 1)])
    gate = g[("spec", "correctness")]
    assert gate["status"] == "unknown"
    assert check(gate, "match_rate")["reason"] == "matches_reference is absent from every requests file"
    # without a baseline the failed share has nothing to be compared with
    assert gate["reason"] == ("match_rate: matches_reference is absent from every requests file; failed_share: no "
                              "matched baseline (no baseline: no none deployment with model m and target_quant bf16)")


def test_correctness_unknown_without_requests(gates_of):
    g = gates_of(deployments=[deployment("spec")], rounds=[round_row("spec", "r1", 0, 2, 1)])
    gate = g[("spec", "correctness")]
    assert gate["status"] == "unknown"
    assert check(gate, "match_rate")["reason"] == "the requests table is absent"


def test_correctness_counts_only_files_that_carry_the_column(tmp_path):
    # date 27 carries matches_reference (1 of 2 true), date 28 does not: its requests are not
    # counted as matching or not (no default applies) -> 1 / 2 = 0.5
    root = tmp_path / "t"
    write_traces(root, deployments=[deployment("spec")], rounds=[round_row("spec", "r1", 0, 2, 1)])
    write_table(root, "requests", {
        "date=2026-11-27": [request("spec", "r1", matches_reference=True),
                            request("spec", "r2", matches_reference=False)],
        "date=2026-11-28": [request("spec", "r3"), request("spec", "r4")],
    })
    ws = api.open_traces(root)
    try:
        gate = {g["gate"]: g for g in evaluate_gates(ws.con, Config())}["correctness"]
    finally:
        ws.close()
    assert check(gate, "match_rate")["value"] == 0.5
    assert gate["status"] == "fail"


# --------------------------------------------------------------------------- quality


def test_quality_against_the_matched_baseline(gates_of):
    g = gates_of(
        deployments=[BASE, deployment("worse"), deployment("close"), deployment("better"),
                     deployment("orphan", baseline_id="nosuch")],
        requests=[
            # baseline mean (0.90 + 0.80) / 2 = 0.85
            request("base", "b1", quality_score=0.90), request("base", "b2", quality_score=0.80),
            # mean 0.81 -> drop 0.04 > 0.01
            request("worse", "r1", quality_score=0.80), request("worse", "r2", quality_score=0.82),
            # mean (0.85 + 0.84 + null) -> 0.845 -> drop 0.005
            request("close", "r1", quality_score=0.85), request("close", "r2", quality_score=0.84),
            request("close", "r3", quality_score=None),
            # mean 0.95 -> drop −0.10: an improvement passes
            request("better", "r1", quality_score=0.95),
            request("orphan", "r1", quality_score=0.5),
        ],
        rounds=[round_row("base", "b1", 0, 0, 0)],
    )
    worse = g[("worse", "quality")]
    assert worse["status"] == "fail"
    c = check(worse, "quality_drop")
    assert c["value"] == pytest.approx(0.04, abs=1e-12) and c["threshold"] == 0.01
    close = g[("close", "quality")]
    assert close["status"] == "pass"
    assert check(close, "quality_drop")["value"] == pytest.approx(0.005, abs=1e-12)
    better = g[("better", "quality")]
    assert better["status"] == "pass"
    assert check(better, "quality_drop")["value"] == pytest.approx(-0.10, abs=1e-12)
    # baseline_id names no deployment: no matched baseline, so no comparison
    orphan = g[("orphan", "quality")]
    assert orphan["status"] == "unknown"
    assert check(orphan, "quality_drop")["value"] is None
    assert "no matched baseline" in orphan["reason"] and "nosuch" in orphan["reason"]
    assert ("base", "quality") not in g


def test_quality_drop_equal_to_the_threshold_passes(gates_of):
    # 0.25 − 0.24 is 0.010000000000000009 in floating point: still ≤ 0.01
    assert 0.25 - 0.24 > 0.01
    g = gates_of(
        deployments=[BASE, deployment("spec")],
        requests=[request("base", "b1", quality_score=0.25), request("spec", "r1", quality_score=0.24)],
        rounds=[round_row("base", "b1", 0, 0, 0)],
    )
    gate = g[("spec", "quality")]
    assert check(gate, "quality_drop")["value"] > 0.01
    assert gate["status"] == "pass"


def test_quality_unknown_cases(gates_of):
    # column absent from every requests file
    g = gates_of(deployments=[BASE, deployment("spec")],
                 requests=[request("base", "b1"), request("spec", "r1")],
                 rounds=[round_row("base", "b1", 0, 0, 0)])
    gate = g[("spec", "quality")]
    assert gate["status"] == "unknown"
    assert check(gate, "quality_drop")["reason"] == "quality_score is absent from every requests file"
    # the baseline has no value
    g = gates_of(deployments=[BASE, deployment("spec")],
                 requests=[request("base", "b1", quality_score=None), request("spec", "r1", quality_score=0.9)],
                 rounds=[round_row("base", "b1", 0, 0, 0)])
    gate = g[("spec", "quality")]
    assert gate["status"] == "unknown"
    assert check(gate, "quality_drop")["reason"] == "baseline base has no request with a quality_score"
    # no baseline at all
    g = gates_of(deployments=[deployment("spec")], requests=[request("spec", "r1", quality_score=0.9)],
                 rounds=[round_row("spec", "r1", 0, 2, 1)])
    assert g[("spec", "quality")]["status"] == "unknown"
    assert "no matched baseline" in g[("spec", "quality")]["reason"]


# --------------------------------------------------------------------------- latency

# (ttft ms, finish − first ms, output tokens, largest streaming gap ms)
LATENCY = [(100.0, 200.0, 11, 50.0), (200.0, 300.0, 11, 60.0), (300.0, 400.0, 11, 70.0),
           (400.0, 500.0, 11, 80.0), (5000.0, 600.0, 11, 300.0)]


def latency_tables(dep: str = "spec") -> dict:
    """One round per request, in its own step: the emissions are the first token and the round's
    end (start + duration), so the request's only gap, its max_stall, is the gap given."""
    reqs, steps, rounds = [], [], []
    for i, (ttft, span, n, gap) in enumerate(LATENCY):
        arrival = 10_000.0 * i
        first = arrival + ttft
        reqs.append(request(dep, f"r{i}", arrival=arrival, first=first, finish=first + span, output_tokens=n,
                            num_preemptions=0))
        steps.append(step(dep, i + 1, gap, start_ms=first))
        rounds.append(round_row(dep, f"r{i}", 0, 2, 1, step_id=i + 1))
    return dict(deployments=[deployment(dep)], requests=reqs, steps=steps, rounds=rounds)


def test_latency_percentiles_against_thresholds(gates_of):
    ttft = np.array([t for t, *_ in LATENCY])
    tpot = np.array([span / (n - 1) for _, span, n, _ in LATENCY])         # 20, 30, 40, 50, 60
    stall = np.array([gap for *_, gap in LATENCY])
    # by hand: ttft p99 = 400 + 0.96 · 4600 = 4816; tpot p95 = 50 + 0.8 · 10 = 58;
    # max_stall p99 = 80 + 0.96 · 220 = 291.2
    assert np.percentile(ttft, 99) == pytest.approx(4816.0)
    assert np.percentile(tpot, 95) == pytest.approx(58.0)
    assert np.percentile(stall, 99) == pytest.approx(291.2)

    gate = gates_of(**latency_tables())[("spec", "latency")]
    assert [c["name"] for c in gate["checks"]] == ["ttft_p99_ms", "tpot_p95_ms", "max_stall_p99_ms"]
    assert check(gate, "ttft_p99_ms")["value"] == pytest.approx(np.percentile(ttft, 99), rel=1e-9)
    assert check(gate, "tpot_p95_ms")["value"] == pytest.approx(np.percentile(tpot, 95), rel=1e-9)
    assert check(gate, "max_stall_p99_ms")["value"] == pytest.approx(np.percentile(stall, 99), rel=1e-9)
    assert [c["status"] for c in gate["checks"]] == ["fail", "pass", "fail"]   # 4816 > 2000, 58 ≤ 60, 291.2 > 250
    assert [c["threshold"] for c in gate["checks"]] == [2000.0, 60.0, 250.0]
    assert gate["status"] == "fail"

    loose = config("[gates.latency]\nttft_p99_ms = 5000\nmax_stall_p99_ms = 300")
    gate = gates_of(loose, **latency_tables())[("spec", "latency")]
    assert gate["status"] == "pass" and gate["reason"] is None
    tight = config("[gates.latency]\nttft_p99_ms = 5000\nmax_stall_p99_ms = 300\ntpot_p95_ms = 57.9")
    gate = gates_of(tight, **latency_tables())[("spec", "latency")]
    assert gate["status"] == "fail"
    assert [c["status"] for c in gate["checks"]] == ["pass", "fail", "pass"]


def test_one_pass_and_one_unknown_check_make_an_unknown_gate(gates_of):
    # without the steps table no streaming gap has a time: max_stall is unknown, while
    # ttft and tpot pass. The gate is unknown, not pass.
    tables = latency_tables()
    del tables["steps"]
    loose = config("[gates.latency]\nttft_p99_ms = 5000")
    gate = gates_of(loose, **tables)[("spec", "latency")]
    assert [c["status"] for c in gate["checks"]] == ["pass", "pass", "unknown"]
    assert gate["status"] == "unknown"
    assert gate["reason"] == "max_stall_p99_ms: the steps table is absent, so streaming gaps have no times"
    # ... but a failing check still makes the gate fail
    gate = gates_of(**tables)[("spec", "latency")]
    assert [c["status"] for c in gate["checks"]] == ["fail", "pass", "unknown"]
    assert gate["status"] == "fail"


def test_latency_unknown_without_first_token_times(gates_of):
    reqs = [{k: v for k, v in request("spec", f"r{i}").items() if k != "first_token_time"} for i in range(3)]
    g = gates_of(deployments=[deployment("spec")], requests=reqs, rounds=[round_row("spec", "r0", 0, 2, 1)])
    gate = g[("spec", "latency")]
    assert gate["status"] == "unknown"
    assert check(gate, "ttft_p99_ms")["reason"] == "first_token_time is absent from every requests file"
    assert check(gate, "tpot_p95_ms")["status"] == "unknown"
    g = gates_of(deployments=[deployment("spec")], rounds=[round_row("spec", "r0", 0, 2, 1)])
    gate = g[("spec", "latency")]
    assert [c["status"] for c in gate["checks"]] == ["unknown"] * 3
    assert all(c["reason"] == "the requests table is absent" for c in gate["checks"])


def latency_rows(dep: str, ttft_scale: float = 1.0, span_scale: float = 1.0, gap_scale: float = 1.0,
                 first_step: int = 1) -> dict:
    """LATENCY with each metric scaled: ttft, tpot (through finish − first) and max_stall scale exactly."""
    reqs, steps, rounds = [], [], []
    for i, (ttft, span, n, gap) in enumerate(LATENCY):
        arrival = 10_000.0 * i
        first = arrival + ttft * ttft_scale
        reqs.append(request(dep, f"r{i}", arrival=arrival, first=first, finish=first + span * span_scale,
                            output_tokens=n, num_preemptions=0))
        steps.append(step(dep, first_step + i, gap * gap_scale, start_ms=first))
        rounds.append(round_row(dep, f"r{i}", 0, 0 if dep == "base" else 2, 0 if dep == "base" else 1,
                                step_id=first_step + i))
    return dict(requests=reqs, steps=steps, rounds=rounds)


def pair_tables(**spec_scales) -> dict:
    base, spec = latency_rows("base"), latency_rows("spec", first_step=100, **spec_scales)
    return dict(deployments=[BASE, deployment("spec")],
                **{t: base[t] + spec[t] for t in ("requests", "steps", "rounds")})


def test_latency_is_compared_with_the_baseline(gates_of):
    # baseline: ttft p99 4816 (> 2000), tpot p95 58 (≤ 60), max_stall p99 291.2 (> 250)
    g = gates_of(**pair_tables(ttft_scale=1.1, span_scale=1.1, gap_scale=1.5))
    base = g[("base", "latency")]
    assert [(c["status"], c["baseline_value"]) for c in base["checks"]] == [("fail", None), ("pass", None),
                                                                            ("fail", None)]
    spec = g[("spec", "latency")]
    ttft, tpot, stall = (check(spec, n) for n in ("ttft_p99_ms", "tpot_p95_ms", "max_stall_p99_ms"))
    # 5297.6 vs 4816: both miss 2000, +10% is within 25%: the service level, shared
    assert ttft["value"] == pytest.approx(4816 * 1.1) and ttft["baseline_value"] == pytest.approx(4816)
    assert ttft["worsening"] == pytest.approx(0.1) and ttft["max_worsening"] == 0.25
    assert ttft["status"] == "shared" and ttft["reason"].startswith("the baseline misses it too (+10%, within 25%)")
    # 63.8 vs 58: +10% is within the tolerance, but it misses the 60 ms that the baseline meets
    assert tpot["value"] == pytest.approx(63.8) and tpot["status"] == "fail"
    assert tpot["reason"] == "misses the threshold that the baseline meets"
    # 436.8 vs 291.2: +50%, speculation's own doing
    assert stall["value"] == pytest.approx(436.8) and stall["status"] == "fail"
    assert stall["reason"] == "+50% on the baseline's value (tolerance 25%): speculation's own doing"
    assert spec["status"] == "fail"
    assert [c["name"] for c in blocking_checks(list(g.values()), "spec")] == ["tpot_p95_ms", "max_stall_p99_ms"]


def test_a_worsening_beyond_the_tolerance_blocks_within_the_threshold(gates_of):
    loose = config("[gates.latency]\nttft_p99_ms = 10000\ntpot_p95_ms = 100\nmax_stall_p99_ms = 1000")
    g = gates_of(loose, **pair_tables(ttft_scale=1.3))
    # 6260.8 ≤ 10000, but +30% on the baseline's 4816
    ttft = check(g[("spec", "latency")], "ttft_p99_ms")
    assert ttft["value"] == pytest.approx(6260.8) and ttft["status"] == "fail"
    # +25% exactly is within the tolerance (inclusive)
    g = gates_of(loose, **pair_tables(ttft_scale=1.25))
    assert check(g[("spec", "latency")], "ttft_p99_ms")["status"] == "pass"


def test_the_tolerance_per_check(gates_of):
    # max_stall +50%: blocks at the default 25%; shared at 60% (both miss 250 ms)
    own = config("[gates.latency]\nmax_stall_p99_ms_max_worsening = 0.6")
    g = gates_of(own, **pair_tables(gap_scale=1.5))
    stall = check(g[("spec", "latency")], "max_stall_p99_ms")
    assert (stall["status"], stall["max_worsening"]) == ("shared", 0.6)
    assert check(g[("spec", "latency")], "ttft_p99_ms")["max_worsening"] == 0.25
    everywhere = config("[gates.latency]\nmax_worsening = 0.05")
    g = gates_of(everywhere, **pair_tables(ttft_scale=1.1))
    assert check(g[("spec", "latency")], "ttft_p99_ms")["status"] == "fail"     # +10% > 5%


def test_without_a_baseline_value_only_the_threshold_decides(gates_of):
    g = gates_of(**latency_tables())
    ttft = check(g[("spec", "latency")], "ttft_p99_ms")
    assert (ttft["status"], ttft["baseline_value"], ttft["worsening"]) == ("fail", None, None)


def failed(dep: str, n: int, errors: int, aborts: int = 0) -> list[dict]:
    reasons = ["error"] * errors + ["abort"] * aborts
    return [request(dep, f"r{i}", finish_reason=reasons[i] if i < len(reasons) else "stop") for i in range(n)]


def test_failed_requests_against_the_baseline(gates_of):
    g = gates_of(
        deployments=[BASE, deployment("same"), deployment("more"), deployment("edge"), deployment("alone",
                                                                                                   baseline_id="x")],
        # base 1 of 20 failed: 5%
        requests=[*failed("base", 20, 1), *failed("same", 20, 0, 1), *failed("more", 20, 1, 1),
                  *failed("edge", 100, 4, 2), *failed("alone", 10, 5)],
        rounds=[round_row("base", "r0", 0, 0, 0)],
    )
    same = check(g[("same", "correctness")], "failed_share")
    assert (same["value"], same["baseline_value"], same["status"]) == (0.05, 0.05, "pass")
    assert same["threshold"] == pytest.approx(0.06)
    # 2 of 20 = 10% > 5% + 1 point
    more = check(g[("more", "correctness")], "failed_share")
    assert (more["value"], more["status"]) == (0.1, "fail")
    # 6 of 100 = 6%: exactly one point above, inclusive
    assert check(g[("edge", "correctness")], "failed_share")["status"] == "pass"
    alone = check(g[("alone", "correctness")], "failed_share")
    assert alone["status"] == "unknown" and alone["reason"].startswith("no matched baseline")
    assert gates_of(config("[gates.correctness]\nmax_failed_share_rise = 0.05"), **dict(
        deployments=[BASE, deployment("more")], requests=[*failed("base", 20, 1), *failed("more", 20, 1, 1)],
        rounds=[round_row("base", "r0", 0, 0, 0)]))[("more", "correctness")]["checks"][1]["status"] == "pass"


# --------------------------------------------------------------------------- capacity


def capacity_tables(preemptions=(1, 0, 0, 0), base_preemptions=0) -> dict:
    # base: 20 steps of 10 ms, each one round of one of 10 requests committing 1 token
    # (enough steps and requests for a usable t0: the [evidence] floors)
    return dict(
        deployments=[BASE, deployment("spec", gamma=4)],
        requests=[*[request("base", f"b{i}", num_preemptions=base_preemptions) for i in range(10)],
                  *[request("spec", f"r{i}", num_preemptions=p) for i, p in enumerate(preemptions)]],
        steps=[*[step("base", i, 10.0) for i in range(1, 21)],
               step("spec", 1, 20.0), step("spec", 2, 30.0)],
        rounds=[*[round_row("base", f"b{i % 10}", i // 10, 0, 0, step_id=i + 1) for i in range(20)],
                round_row("spec", "r0", 0, 4, 3, step_id=1),     # committed 4 in 20 ms
                round_row("spec", "r0", 1, 4, 1, step_id=2)],    # committed 2 in 30 ms
    )


def evidence(speedup, interval, coverage=1.0, requests=50, basis="rounds"):
    return {"spec": {"basis": basis, "speedup": speedup, "interval": interval, "coverage": coverage,
                     "num_requests": requests, "baseline_id": "base", "reason": None}}


def test_capacity_speedup_and_preemptions(gates_of):
    # t0(1) = 200 ms / 20 tokens = 10 ms; speedup = 10 · (4 + 2) / (20 + 30) = 1.2
    # preemptions per request = (1 + 0 + 0 + 0) / 4 = 0.25
    g = gates_of(**capacity_tables())
    cap = g[("spec", "capacity")]
    assert [c["name"] for c in cap["checks"]] == ["speedup", "preemptions_per_request"]
    # without the verdict's evidence the step speedup has no interval: it does not decide
    assert check(cap, "speedup")["value"] == pytest.approx(1.2, rel=1e-12)
    assert check(cap, "speedup")["status"] == "unknown"
    assert check(cap, "speedup")["reason"].startswith("no 95% interval")
    assert check(cap, "preemptions_per_request")["value"] == pytest.approx(0.25)
    assert check(cap, "preemptions_per_request")["status"] == "fail"        # 0.25 > 0.05
    assert cap["status"] == "fail"

    relaxed = config("[gates.capacity]\nmax_preemptions_per_request = 0.25")
    cap = gates_of(relaxed, evidence(1.2, [1.1, 1.3]), **capacity_tables())[("spec", "capacity")]
    assert cap["status"] == "pass"
    assert check(cap, "speedup")["interval"] == [1.1, 1.3] and check(cap, "speedup")["basis"] == "rounds"
    strict = config("[gates.capacity]\nmax_preemptions_per_request = 0.25\nmin_speedup = 1.5")
    cap = gates_of(strict, evidence(1.2, [1.1, 1.3]), **capacity_tables())[("spec", "capacity")]
    assert [c["status"] for c in cap["checks"]] == ["fail", "pass"]            # 1.3 < 1.5
    assert cap["status"] == "fail"


@pytest.mark.parametrize("speedup, interval, coverage, requests, status, reason", [
    (1.2, [1.1, 1.3], 0.9, 50, "pass", None),
    (0.9, [0.85, 0.95], 0.9, 50, "fail", None),                 # the upper bound is below 1
    (0.9, [0.85, 0.95], 0.1, 50, "fail", None),                 # ... whatever the coverage
    (1.02, [0.91, 1.14], 0.9, 50, "unknown", "its 95% interval [0.91, 1.14] includes min_speedup (1): the data "
                                             "can't tell"),
    (1.2, [1.1, 1.3], 0.04, 50, "unknown", "it covers 4.0% of the deployment's committed tokens, below "
                                           "min_speedup_coverage (50%)"),
    (1.2, [1.1, 1.3], 0.5, 50, "pass", None),                   # coverage equal to the floor decides
    (1.2, [1.0, 1.3], 0.9, 50, "unknown", "its 95% interval [1, 1.3] includes min_speedup (1): the data can't tell"),
    (1.2, None, 0.9, 50, "unknown", "no 95% interval (too few requests to resample): the point estimate "
                                    "alone does not decide"),
    (1.2, [1.1, 1.3], 0.9, 9, "unknown", "it rests on 9 of the deployment's requests (10 needed, "
                                         "[evidence] min_requests)"),
])
def test_the_speedup_decides_by_its_interval(gates_of, speedup, interval, coverage, requests, status, reason):
    relaxed = config("[evidence]\nmin_requests = 10\n[gates.capacity]\nmax_preemptions_per_request = 1")
    cap = gates_of(relaxed, evidence(speedup, interval, coverage, requests), **capacity_tables())[("spec", "capacity")]
    c = check(cap, "speedup")
    assert (c["status"], c["reason"]) == (status, reason)
    assert c["coverage"] == coverage and c["min_coverage"] == 0.5


def test_capacity_unknown_without_speedup_or_preemptions(gates_of):
    # no baseline: speedup unknown, with the speedup view's note as the reason
    tables = capacity_tables(preemptions=(0, 0, 0, 0))
    tables["deployments"] = [BASE, deployment("spec", gamma=4, baseline_id="nosuch")]
    cap = gates_of(**tables)[("spec", "capacity")]
    assert [c["status"] for c in cap["checks"]] == ["unknown", "pass"]
    assert cap["status"] == "unknown"
    assert "nosuch" in check(cap, "speedup")["reason"]
    # num_preemptions absent from every file: unknown, not 0 (so not a pass), speedup passes
    tables = capacity_tables()
    tables["requests"] = [{k: v for k, v in r.items() if k != "num_preemptions"} for r in tables["requests"]]
    g = gates_of(evidence=evidence(1.2, [1.1, 1.3]), **tables)
    cap = g[("spec", "capacity")]
    assert [c["status"] for c in cap["checks"]] == ["pass", "unknown"]
    assert cap["status"] == "unknown"
    assert cap["reason"] == "preemptions_per_request: num_preemptions is absent from every requests file"
    assert g[("base", "capacity")]["status"] == "unknown"


def test_baseline_gets_only_latency_and_capacity_without_min_speedup(gates_of):
    g = gates_of(**capacity_tables(base_preemptions=0))
    assert [gate for dep, gate in g if dep == "base"] == ["latency", "capacity"]
    cap = g[("base", "capacity")]
    assert [c["name"] for c in cap["checks"]] == ["preemptions_per_request"]
    assert cap["status"] == "pass"                                           # 0 / 10 ≤ 0.05
    # a huge min_speedup changes nothing for the baseline
    g = gates_of(config("[gates.capacity]\nmin_speedup = 100"), evidence(1.2, [1.1, 1.3]), **capacity_tables())
    assert g[("base", "capacity")]["status"] == "pass"
    assert g[("spec", "capacity")]["status"] == "fail"


# --------------------------------------------------------------------------- shape, order, rendering


def test_order_and_shape(tmp_path):
    root = write_traces(tmp_path / "t", **capacity_tables())
    write_traces(root, deployments=[deployment("zeta"), BASE, deployment("alpha", method="ngram"),
                                    deployment("spec", gamma=4)])
    ws = api.open_traces(root)
    try:
        result = evaluate_gates(ws.con)       # the default config
    finally:
        ws.close()
    assert [(g["deployment_id"], g["gate"]) for g in result] == [
        ("alpha", "correctness"), ("alpha", "quality"), ("alpha", "latency"), ("alpha", "capacity"),
        ("base", "latency"), ("base", "capacity"),
        ("spec", "correctness"), ("spec", "quality"), ("spec", "latency"), ("spec", "capacity"),
        ("zeta", "correctness"), ("zeta", "quality"), ("zeta", "latency"), ("zeta", "capacity"),
    ]
    for g in result:
        assert set(g) == {"deployment_id", "gate", "status", "reason", "checks"}
        assert g["status"] in ("pass", "fail", "shared", "unknown")
        for c in g["checks"]:
            extra = {"latency": {"n", "baseline_n"} | ({"worsening", "max_worsening"} if g["deployment_id"] != "base"
                                                       else set()),
                     "capacity": {"basis", "interval", "coverage", "min_coverage"} if c["name"] == "speedup"
                     else set()}.get(g["gate"], set())
            assert set(c) == {"name", "value", "threshold", "baseline_value", "status", "reason"} | extra
            assert c["status"] in ("pass", "fail", "shared", "unknown")
            if c["status"] == "unknown":
                assert c["reason"]
    # spec's preemptions (0.25 > 0.05) block it; its stalls (11 ms: first token at 10 ms, rounds ending
    # at 21 and 32 ms) are shorter than its baseline's
    assert [c["name"] for c in blocking_checks(result, "spec")] == ["preemptions_per_request"]
    assert blocking_checks(result, "zeta") == []


def test_unknown_is_never_pass_at_gate_level():
    from analyzer.decide.gates import _gate
    c = {"name": "x", "value": 1.0, "threshold": 1.0, "status": "pass", "reason": None}
    u = {"name": "y", "value": None, "threshold": 1.0, "status": "unknown", "reason": "missing"}
    f = {"name": "z", "value": 2.0, "threshold": 1.0, "status": "fail", "reason": None}
    sh = {"name": "w", "value": 2.0, "threshold": 1.0, "status": "shared", "reason": "both"}
    assert _gate("d", "g", [c])["status"] == "pass"
    assert _gate("d", "g", [c, sh])["status"] == "shared"
    assert _gate("d", "g", [c, sh, u])["status"] == "unknown"
    assert _gate("d", "g", [c, u])["status"] == "unknown"
    assert _gate("d", "g", [c, u, f])["status"] == "fail"
    assert _gate("d", "g", [])["status"] == "unknown"


def test_evaluate_on_a_loaded_database(tmp_path):
    root = write_traces(tmp_path / "t", **capacity_tables())
    db = tmp_path / "t.duckdb"
    api.write_database(root, db)
    ws = api.open_database(db)
    try:
        from_db = evaluate_gates(ws.con)
    finally:
        ws.close()
    ws = api.open_traces(root)
    try:
        assert evaluate_gates(ws.con) == from_db
    finally:
        ws.close()


def test_render_gates_markdown(gates_of):
    tables = capacity_tables()
    tables["requests"] = [{**r, "matches_reference": True} for r in tables["requests"]]
    result = list(gates_of(**tables).values())
    text = render_gates_markdown(result)
    assert text.startswith("## Deployment gates\n")
    assert "| deployment | correctness | quality | latency | capacity |" in text
    # the baseline: correctness and quality not applied
    assert "| base | – | – | " in text
    # spec: correctness PASS, quality UNKNOWN (no quality_score), capacity FAIL
    assert "| spec | PASS | UNKNOWN | " in text and text.rstrip().count("FAIL") >= 2
    assert "| spec | capacity | preemptions_per_request | 0.250 | – | ≤ 0.050 | FAIL |" in text
    assert ("| spec | quality | quality_drop | – | – | ≤ 0.0100 | UNKNOWN | "
            "quality_score is absent from every requests file |") in text
    # passing checks have no detail rows, whatever their gate: the table shows what its title says
    assert "| spec | correctness |" not in text
    assert "PASS |" not in text.split("Checks that fail")[1]
    assert render_gates_markdown([]) == ""


def test_few_requests_decide_nothing(gates_of):
    # 5 requests a side: with the default floor (10) a p99 of 5 values is their maximum, no service
    # level, and a failed share of 5 requests moves by 20 points per request: unknown, never blocking
    g = gates_of(Config(), **pair_tables(gap_scale=1.5))
    spec = g[("spec", "latency")]
    assert [c["status"] for c in spec["checks"]] == ["unknown"] * 3
    assert check(spec, "max_stall_p99_ms")["reason"] == "a percentile of 5 requests (10 needed, [evidence] min_requests)"
    assert (check(spec, "max_stall_p99_ms")["n"], check(spec, "max_stall_p99_ms")["baseline_n"]) == (5, 5)
    assert check(g[("spec", "correctness")], "failed_share")["reason"] == (
        "a share of 5 requests (10 needed on both sides, [evidence] min_requests)")
    assert blocking_checks(list(g.values()), "spec") == []
    # the baseline's own checks too
    assert {c["status"] for c in g[("base", "latency")]["checks"]} == {"unknown"}
    # a floor of 5 lets them decide: the stall is +50%
    g = gates_of(config("[evidence]\nmin_requests = 5"), **pair_tables(gap_scale=1.5))
    assert check(g[("spec", "latency")], "max_stall_p99_ms")["status"] == "fail"
