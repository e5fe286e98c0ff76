"""analyzer.gates: the four deployment gates (docs/commands.md "Gates", seed 8.2) on tiny traces.

Every expected value is worked out by hand in the comment next to it. Latency
percentiles use numpy's default (linear) percentile as the oracle, as
docs/metrics.md says; what a latency check decides with is its percentile's 95 %
interval, read off 1 % value bins (see the latency section).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from analyzer import api
from analyzer.analysis.config import Config, parse_config
from analyzer.decide.gates import blocking_checks, evaluate_gates
from analyzer.render.gates import render_gates_markdown
from tracebuilder import deployment, round_row, write_table, write_traces, request, step

# half a latency bin (analysis/latency_intervals.py, HALF_BIN): each percentile interval is widened by it on
# either side, a ratio's by a whole bin, so a sample whose replicates all read one bin still gets its width
H = math.exp(0.005)

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


@pytest.fixture
def gates_each(tmp_path):
    """gates_each([config, ...], deployments=[...], ...) -> one {(deployment_id, gate): gate dict}
    per config, all evaluated on one workspace of the tables."""

    def _gates(configs: list[Config], **tables) -> list[dict]:
        root = write_traces(tmp_path / "each", **tables)
        with api.open_traces(root) as ws:
            assert ws.con.execute("select count(*) from rejected_rows").fetchone()[0] == 0
            return [{(g["deployment_id"], g["gate"]): g for g in evaluate_gates(ws.con, cfg)} for cfg in configs]

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
    assert check(ok, "match_rate")["status"] == "pass" and check(ok, "match_rate")["value"] == 1.0
    # its failed share, 0 of 3 against base's 0 of 1, can't show it held: Newcombe's interval of
    # the rise squares and adds each share's exact (Clopper-Pearson) 90 % bounds; the upper bound
    # of 0 of n is 1 − 0.05^(1/n): [0 − 0.95, 0 + (1 − 0.05^(1/3))] = [−95.0 %, +63.2 %], across
    # the tolerated 1 point: unknown, so is the gate
    failed = check(ok, "failed_share")
    assert failed["status"] == "unknown"
    assert failed["rise_interval"] == pytest.approx([-0.95, 1 - 0.05 ** (1 / 3)])
    assert ok["status"] == "unknown"
    assert ok["reason"] == ("failed_share: the rise over base's share lies in [-95.0%, +63.2%] (90%): it can't tell "
                            "a rise of more than 1.0% from noise")
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

# A latency check decides by its percentile's 95 % interval (analysis/latency_intervals.py):
# a bootstrap over blocks of time, which on these traces (fewer requests than the 256
# blocks) is one request per block. The interval is read off value bins 1 % wide: a value
# v falls in bin floor(100 · ln v), whose value is e^((bin + 0.5) / 100), within 0.5 % of v.
# Where every request of a side has the same value, every resample's percentile is that
# value's bin: the interval is one point, exact up to its bin. The bins used below:
#   4816 ms: 100 ln = 847.97 → e^8.475 = 4,793.4      5297.6 (×1.1): 857.50 → e^8.575 = 5,297.6
#   6260.8 (×1.3): 874.21 → e^8.745 = 6,279.2        5779.2 (×1.2): 866.20 → e^8.665 = 5,796.4
#   58 ms: 406.04 → e^4.065 = 58.26                  63.8 (×1.1): 415.58 → e^4.155 = 63.75
#   291.2 ms: 567.40 → e^5.675 = 291.49              436.8 (×1.5): 607.95 → e^6.075 = 434.85
#   300 ms: 570.38 → e^5.705 = 300.37                330: 579.91 → e^5.795 = 328.65
#   450 ms: 610.92 → e^6.105 = 448.09
# so a ratio of two such points is e^(Δbin / 100): ×1.1 on 4816 → e^0.10 = 1.105, ×1.3 → e^0.27
# = 1.310, ×1.2 → e^0.19 = 1.209, ×1.1 on 58 → e^0.09 = 1.094, ×1.5 on 291.2 → e^0.40 = 1.492.

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


def latency_rows(dep: str, values: list[tuple[float, float, float]], first_step: int = 1,
                 together: int = 1) -> dict:
    """A request per (ttft, tpot, max stall) in ``values``, groups of ``together`` 10 s apart
    by arrival (a group's requests share their times, so each decodes at concurrency
    ``together``, and their rounds share one step of that batch size; a lone request decodes
    at concurrency 1). Each request has 51 output tokens decoded over 50 · tpot ms, and one
    round from its first token lasting the stall: its only streaming gap."""
    reqs, steps, rounds = [], [], []
    plain = dep == "base"
    for i, (ttft, tpot, stall) in enumerate(values):
        group = i // together
        arrival = 10_000.0 * group
        first = arrival + ttft
        reqs.append(request(dep, f"r{i}", arrival=arrival, first=first, finish=first + 50 * tpot,
                            output_tokens=51, num_preemptions=0))
        sid = first_step + group
        if i % together == 0:
            steps.append(step(dep, sid, stall, batch_size=together, start_ms=first))
        rounds.append(round_row(dep, f"r{i}", 0, 0 if plain else 2, 0 if plain else 1, step_id=sid))
    return dict(requests=reqs, steps=steps, rounds=rounds)


# base's values: TTFT p99 4816 ms (misses 2000), TPOT p95 58 ms (meets 60), max stall p99
# 291.2 ms (misses 250); constant over its requests
BASE_LATENCY = (4816.0, 58.0, 291.2)


def pair_tables(ttft_scale: float = 1.0, tpot_scale: float = 1.0, stall_scale: float = 1.0, n: int = 10) -> dict:
    """base and spec, ``n`` lone requests each (both at concurrency 1: matched on load), every
    request of a side with the same values: base's BASE_LATENCY, spec's scaled."""
    ttft, tpot, stall = BASE_LATENCY
    base = latency_rows("base", [BASE_LATENCY] * n)
    spec = latency_rows("spec", [(ttft * ttft_scale, tpot * tpot_scale, stall * stall_scale)] * n, first_step=100)
    return dict(deployments=[BASE, deployment("spec")],
                **{t: base[t] + spec[t] for t in ("requests", "steps", "rounds")})


def alone_tables(values=BASE_LATENCY, n: int = 10) -> dict:
    """spec alone (no baseline), ``n`` lone requests with the same values."""
    return dict(deployments=[deployment("spec")], **latency_rows("spec", [values] * n))


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
    assert [c["threshold"] for c in gate["checks"]] == [2000.0, 60.0, 250.0]
    # The values are not what decides: five requests spread across each target. A p99 (or
    # p95) of a resample of five is its largest request, and a resample leaves out the
    # largest with probability e^-1 = 37 % and keeps it with 63 %: each interval runs from a
    # smaller request to the largest one's bin (5000: 100 ln = 851.72 → e^8.515 = 4,989.0;
    # 60: 409.43 → e^4.095 = 60.04; 300: e^5.705 = 300.37), across the target, so none of
    # them decides (each widened by half a bin, e^0.005: the bins' quantisation never narrows it)
    assert [c["status"] for c in gate["checks"]] == ["unknown"] * 3
    for c, target, top in zip(gate["checks"], (2000, 60, 250), (4989.05 * H, 60.039 * H, 300.37 * H)):
        assert c["interval"][0] <= target < c["interval"][1] == pytest.approx(top, rel=1e-3)
        assert c["reason"].startswith("its 95% interval [") and c["reason"].endswith(f"includes the target ({target:,} ms)")
    assert gate["status"] == "unknown"

    # ten requests, each with base's values: each interval is the value's bin alone, widened by half a
    # bin each side, and with no baseline the target alone decides: [4,770, 4,817] > 2000 fails,
    # [57.98, 58.56] ≤ 60 passes, [290.0, 293.0] > 250 fails
    tables = alone_tables()
    gate = gates_of(**tables)[("spec", "latency")]
    assert [c["value"] for c in gate["checks"]] == pytest.approx([4816.0, 58.0, 291.2])
    assert [c["interval"] for c in gate["checks"]] == [pytest.approx([4793.42 / H, 4793.42 * H], rel=1e-5),
                                                       pytest.approx([58.265 / H, 58.265 * H], rel=1e-4),
                                                       pytest.approx([291.49 / H, 291.49 * H], rel=1e-4)]
    assert [c["status"] for c in gate["checks"]] == ["fail", "pass", "fail"]
    assert gate["status"] == "fail"
    loose = config("[gates.latency]\nttft_p99_ms = 5000\nmax_stall_p99_ms = 300")
    gate = gates_of(loose, **tables)[("spec", "latency")]
    assert gate["status"] == "pass" and gate["reason"] is None
    # inclusive: a target equal to the top of the TPOT's interval, its bin e^4.065 widened by half a
    # bin, e^4.07 = 58.56, passes; its bin alone, 58.265, lies inside the interval: unknown; 57.5,
    # below the interval (57.97), fails
    # (the top as computed, e^4.065 · e^0.005, to within a rounding of the last bit)
    for target, status in ((math.exp(4.065) * H * (1 + 1e-12), "pass"), (math.exp(4.065), "unknown"), (57.5, "fail")):
        tight = config(f"[gates.latency]\nttft_p99_ms = 5000\nmax_stall_p99_ms = 300\ntpot_p95_ms = {target!r}")
        gate = gates_of(tight, **tables)[("spec", "latency")]
        assert [c["status"] for c in gate["checks"]] == ["pass", status, "pass"]


def test_one_pass_and_one_unknown_check_make_an_unknown_gate(gates_of):
    # without the steps table no streaming gap has a time: max_stall is unknown, while
    # ttft (4,793 ≤ 5000) and tpot (58.26 ≤ 60) pass. The gate is unknown, not pass.
    tables = alone_tables()
    del tables["steps"]
    loose = config("[gates.latency]\nttft_p99_ms = 5000")
    gate = gates_of(loose, **tables)[("spec", "latency")]
    assert [c["status"] for c in gate["checks"]] == ["pass", "pass", "unknown"]
    assert gate["status"] == "unknown"
    assert gate["reason"] == "max_stall_p99_ms: the steps table is absent, so streaming gaps have no times"
    # ... but a failing check still makes the gate fail (4,793 > 2000, no baseline)
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


def test_latency_is_compared_with_the_baseline_at_the_same_load(gates_of):
    # ten lone requests a side (both at concurrency 1: every request matched). base: TTFT
    # 4816 (> 2000), TPOT 58 (≤ 60), stall 291.2 (> 250); spec: TTFT and TPOT ×1.1, stall ×1.5
    g = gates_of(**pair_tables(ttft_scale=1.1, tpot_scale=1.1, stall_scale=1.5))
    base = g[("base", "latency")]
    # the baseline is judged on its targets alone
    assert [(c["status"], c["baseline_value"]) for c in base["checks"]] == [("fail", None), ("pass", None),
                                                                            ("fail", None)]
    spec = g[("spec", "latency")]
    ttft, tpot, stall = (check(spec, n) for n in ("ttft_p99_ms", "tpot_p95_ms", "max_stall_p99_ms"))
    assert all(c["matched_share"] == 1.0 and (c["n"], c["baseline_n"]) == (10, 10) for c in (ttft, tpot, stall))
    # TTFT 5297.6 vs 4816 (bins 5,297.6 and 4,793.4): both past 2000, the ratio e^0.10 = 1.105
    # within 1 + 25 %: the service level, shared
    assert ttft["value"] == pytest.approx(4816 * 1.1) and ttft["baseline_value"] == pytest.approx(4793.42, rel=1e-5)
    # every replicate gives the same bins: the intervals are the bin widened by half a bin each side,
    # and the ratio's by a bin (two half bins)
    assert ttft["baseline_interval"] == pytest.approx([4793.42 / H, 4793.42 * H], rel=1e-5)
    assert ttft["ratio"] == pytest.approx(math.exp(0.10))
    assert ttft["ratio_interval"] == pytest.approx([math.exp(0.10) / H**2, math.exp(0.10) * H**2])
    assert ttft["worsening"] == pytest.approx(math.exp(0.10) - 1) and ttft["max_worsening"] == 0.25
    assert ttft["status"] == "shared"
    assert ttft["reason"] == ("base misses it too at the same load (4,793 ms, [4,770, 4,817] ms), within 25%: "
                              "the service level, not speculation")
    # TPOT 63.8 (bin 63.75 > 60) vs 58 (bin 58.26 ≤ 60): it misses the target base meets at the
    # same load, though +10 % is within the tolerance
    assert tpot["value"] == pytest.approx(63.8) and tpot["status"] == "fail"
    assert tpot["reason"] == "misses the target, which base meets at the same load (58 ms, [58, 59] ms)"
    # stall 436.8 vs 291.2: both past 250, the ratio e^0.40 = 1.49 beyond 1 + 25 %
    assert stall["value"] == pytest.approx(436.8) and stall["status"] == "fail"
    assert stall["ratio_interval"] == pytest.approx([math.exp(0.40) / H**2, math.exp(0.40) * H**2])
    assert stall["reason"] == "1.49× base's at the same load ([1.48, 1.51]), beyond the tolerance of 25%"
    assert spec["status"] == "fail"
    assert [c["name"] for c in blocking_checks(list(g.values()), "spec")] == ["tpot_p95_ms", "max_stall_p99_ms"]


def test_a_worsening_inside_the_target_is_a_finding_not_a_block(gates_of):
    # Targets of 10 s, 100 ms and 1 s: every value is inside them. spec's TTFT ×1.3: 6260.8
    # (bin 6,279) against 4816 (bin 4,793), the ratio e^0.27 = 1.31 past 1 + 25 %: it passes
    # (a value inside its target passes whatever its ratio), and the rise is a finding
    loose = config("[gates.latency]\nttft_p99_ms = 10000\ntpot_p95_ms = 100\nmax_stall_p99_ms = 1000")
    g = gates_of(loose, **pair_tables(ttft_scale=1.3))
    ttft = check(g[("spec", "latency")], "ttft_p99_ms")
    assert ttft["value"] == pytest.approx(6260.8) and ttft["status"] == "pass" and ttft["reason"] is None
    assert ttft["ratio_interval"] == pytest.approx([math.exp(0.27) / H**2, math.exp(0.27) * H**2])
    assert ttft["finding"] == "131% of base's at the same load ([1.30, 1.32] as a ratio), inside the target"
    assert g[("spec", "latency")]["status"] == "pass"
    assert blocking_checks(list(g.values()), "spec") == []
    # ×1.2: the ratio e^0.19 = 1.209 lies within the tolerance: no finding either
    g = gates_of(loose, **pair_tables(ttft_scale=1.2))
    ttft = check(g[("spec", "latency")], "ttft_p99_ms")
    assert (ttft["status"], ttft["finding"]) == ("pass", None)
    assert ttft["ratio"] == pytest.approx(math.exp(0.19))


def test_the_tolerance_per_check(gates_of):
    # the stall ×1.5 (ratio e^0.40 = 1.49), both sides past 250: it blocks at the default 25 %,
    # and is shared at 60 % (1.49 ≤ 1.6)
    own = config("[gates.latency]\nmax_stall_p99_ms_max_worsening = 0.6")
    g = gates_of(own, **pair_tables(stall_scale=1.5))
    stall = check(g[("spec", "latency")], "max_stall_p99_ms")
    assert (stall["status"], stall["max_worsening"]) == ("shared", 0.6)
    assert check(g[("spec", "latency")], "ttft_p99_ms")["max_worsening"] == 0.25
    # TTFT ×1.1 (ratio e^0.10 = 1.105), both past 2000: beyond a tolerance of 5 % everywhere
    everywhere = config("[gates.latency]\nmax_worsening = 0.05")
    g = gates_of(everywhere, **pair_tables(ttft_scale=1.1))
    ttft = check(g[("spec", "latency")], "ttft_p99_ms")
    assert (ttft["status"], ttft["max_worsening"]) == ("fail", 0.05)
    assert ttft["reason"] == "1.11× base's at the same load ([1.09, 1.12]), beyond the tolerance of 5%"


def test_without_a_baseline_value_only_the_threshold_decides(gates_of):
    # spec alone, TTFT 4816 in each of ten requests: its interval (the bin, 4,793) lies past
    # 2000, and there is nothing to compare it with
    g = gates_of(**alone_tables())
    ttft = check(g[("spec", "latency")], "ttft_p99_ms")
    assert (ttft["status"], ttft["baseline_value"], ttft["worsening"], ttft["ratio"]) == ("fail", None, None, None)
    assert ttft["reason"] == "misses the target; no matched baseline to compare with"


def test_a_miss_decides_only_at_the_same_load_and_by_its_interval(gates_of):
    # base: ten lone requests (concurrency 1), TTFT 1000, TPOT 20, stall 300 (past 250).
    # "busy": twelve requests in three groups of four sharing their times (concurrency 4),
    #   stall 400: past 250, but base never ran at 4: not matched on load, unknown.
    # "spread": twenty lone requests, nineteen with a 330 ms stall and one with 450: its p99
    #   is 450 when a resample holds that request (63 %) and 330 when not (37 %), so its
    #   interval is [328.65, 448.09] (the bins), past 250; base misses it too ([300.37]
    #   alone), and the ratio's interval [e^0.09, e^0.40] = [1.09, 1.49] straddles 1.25:
    #   it can't tell speculation's share from the service level's: unknown.
    # Their TTFT and TPOT lie inside the targets: they pass, matched or not.
    base = latency_rows("base", [(1000.0, 20.0, 300.0)] * 10)
    busy = latency_rows("busy", [(1000.0, 20.0, 400.0)] * 12, first_step=100, together=4)
    spread = latency_rows("spread", [(1000.0, 20.0, 450.0 if i == 10 else 330.0) for i in range(20)],
                          first_step=200)
    g = gates_of(deployments=[BASE, deployment("busy"), deployment("spread")],
                 **{t: base[t] + busy[t] + spread[t] for t in ("requests", "steps", "rounds")})
    stall = check(g[("busy", "latency")], "max_stall_p99_ms")
    assert stall["interval"] == pytest.approx([401.42 / H, 401.42 * H], rel=1e-4)       # 400: 599.15 → e^5.995
    assert (stall["matched_share"], stall["baseline_value"], stall["load"], stall["baseline_load"]) == (
        0.0, None, 4.0, 1.0)
    assert stall["status"] == "unknown"
    assert stall["reason"] == ("misses the target, but not matched on load: it ran at concurrency 4 and base at 1 "
                               "(medians; 0% of its requests at loads both ran); the baseline's value at another "
                               "load says nothing about speculation")
    assert [c["status"] for c in g[("busy", "latency")]["checks"]] == ["pass", "pass", "unknown"]
    stall = check(g[("spread", "latency")], "max_stall_p99_ms")
    # the value: numpy's p99 of the twenty, 330 + 0.81 · 120 = 427.2
    assert stall["value"] == pytest.approx(427.2)
    assert stall["interval"] == pytest.approx([328.652 / H, 448.093 * H], rel=1e-5)
    assert stall["ratio_interval"] == pytest.approx([math.exp(0.09) / H**2, math.exp(0.40) * H**2])
    assert stall["status"] == "unknown"
    assert stall["reason"] == ("misses the target; at the same load base gives 300 ms ([299, 302] ms) and the ratio "
                               "[1.08, 1.51] can't tell speculation's share from the service level's")
    assert blocking_checks(list(g.values()), "busy") == blocking_checks(list(g.values()), "spread") == []


def failed(dep: str, n: int, errors: int, aborts: int = 0) -> list[dict]:
    reasons = ["error"] * errors + ["abort"] * aborts
    return [request(dep, f"r{i}", finish_reason=reasons[i] if i < len(reasons) else "stop") for i in range(n)]


# The rise p1 − p2 (gates.share_difference): Newcombe's square-and-add of each share's exact
# Clopper–Pearson bounds, each one-sided 95 %. For 0 of n the upper bound is the p with
# (1 − p)^n = 0.05: 1 − 0.05^(1/n); 0 of 300 → 0.99361 %.
U300 = 1 - 0.05 ** (1 / 300)


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p), summed term by term: the oracle of a Clopper–Pearson bound."""
    return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1))


def test_failed_requests_against_the_baseline(gates_of, gates_each):
    tables = dict(
        deployments=[BASE, deployment("same"), deployment("more"), deployment("few"),
                     deployment("alone", baseline_id="x")],
        # base: 0 of 300 failed
        requests=[*failed("base", 300, 0), *failed("same", 300, 0), *failed("more", 300, 10, 5),
                  *failed("few", 20, 0), *failed("alone", 10, 5)],
        rounds=[round_row("base", "r0", 0, 0, 0)],
    )
    g = gates_of(**tables)
    # same: 0 of 300 against 0 of 300: the rise lies in [−0.994 %, +0.994 %]: at most 1 point
    # (the tolerance, now the check's threshold) by its upper bound: pass
    same = check(g[("same", "correctness")], "failed_share")
    assert (same["value"], same["baseline_value"], same["threshold"], same["status"]) == (0.0, 0.0, 0.01, "pass")
    assert (same["rise"], same["n"], same["baseline_n"]) == (0.0, 300, 300)
    assert same["rise_interval"] == pytest.approx([-U300, U300], rel=1e-9)
    # more: 15 of 300 (10 errors, 5 aborts) = 5 %. Its exact lower bound l is the p at which 15 or
    # more of 300 happen with probability 0.05 (0.031070); the rise's lower bound
    # 0.05 − √((0.05 − l)² + U300²) = 0.028621 > 1 %: fail
    more = check(g[("more", "correctness")], "failed_share")
    assert (more["value"], more["rise"], more["status"]) == (0.05, 0.05, "fail")
    lower = 0.05 - ((0.05 - 0.031070) ** 2 + U300 ** 2) ** 0.5
    assert more["rise_interval"][0] == pytest.approx(lower, abs=2e-6)
    assert binomial_tail(15, 300, 0.031070) == pytest.approx(0.05, abs=2e-4)     # l is that p
    assert more["reason"] == "the share rose by 2.9% at least (one-sided 95%), more than 1.0%"
    # few: 0 of 20 against base's 0 of 300: the rise lies in [−0.99 %, 1 − 0.05^(1/20)] =
    # [−1.0 %, +13.9 %], across 1 point: 20 requests can't show the share held: unknown
    few = check(g[("few", "correctness")], "failed_share")
    assert few["status"] == "unknown"
    assert few["rise_interval"] == pytest.approx([-U300, 1 - 0.05 ** (1 / 20)], rel=1e-9)
    assert few["reason"] == ("the rise over base's share lies in [-1.0%, +13.9%] (90%): it can't tell a rise of more "
                             "than 1.0% from noise")
    alone = check(g[("alone", "correctness")], "failed_share")
    assert alone["status"] == "unknown" and alone["reason"].startswith("no matched baseline")
    # the tolerance from the config: 0.8 % is below same's upper bound 0.994 %: unknown; a
    # tolerance equal to it passes (inclusive); more's lower bound 2.86 % is within 4 %: unknown
    tolerances = (0.008, U300, 0.04)
    found = gates_each([config(f"[gates.correctness]\nmax_failed_share_rise = {rise!r}") for rise in tolerances],
                       **tables)
    assert [check(g[("same", "correctness")], "failed_share")["status"] for g in found] == [
        "unknown", "pass", "pass"]
    assert [check(g[("more", "correctness")], "failed_share")["status"] for g in found] == [
        "fail", "fail", "unknown"]


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
            # each check carries the same keys whatever its status (null where unknown)
            latency = {"n", "interval", "baseline_n", "baseline_interval", "ratio", "ratio_interval",
                       "matched_share", "load", "baseline_load", "finding"}
            extra = {"latency": latency | ({"worsening", "max_worsening"} if g["deployment_id"] != "base" else set()),
                     "correctness": {"rise", "rise_interval", "n", "baseline_n"} if c["name"] == "failed_share"
                     else set(),
                     "capacity": {"basis", "interval", "coverage", "min_coverage"} if c["name"] == "speedup"
                     else set()}.get(g["gate"], set())
            assert set(c) == {"name", "value", "threshold", "baseline_value", "status", "reason"} | extra, c
            assert c["status"] in ("pass", "fail", "shared", "unknown")
            if c["status"] == "unknown":
                assert c["reason"]
    # spec's preemptions (0.25 > 0.05) block it; its latency and failed share rest on its 4
    # requests (10 needed, the default [evidence] min_requests): unknown, blocking nothing
    assert {c["status"] for g in result if g["deployment_id"] == "spec" and g["gate"] == "latency"
            for c in g["checks"]} == {"unknown"}
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
    # spec: correctness UNKNOWN (its match rate passes, but its failed share, 0 of 4 against 0 of
    # 10, can't show a rise within 1 point: Newcombe's upper bound is z²/(4 + z²) = 40 %),
    # quality UNKNOWN (no quality_score), capacity FAIL
    assert "| spec | UNKNOWN | UNKNOWN | " in text and text.rstrip().count("FAIL") >= 2
    assert "| spec | capacity | preemptions_per_request | 0.250 | – | ≤ 0.050 | FAIL |" in text
    assert ("| spec | quality | quality_drop | – | – | ≤ 0.0100 | UNKNOWN | "
            "quality_score is absent from every requests file |") in text
    assert "| spec | correctness | failed_share |" in text
    # passing checks have no detail rows, whatever their gate: the table shows what its title says
    assert "| spec | correctness | match_rate |" not in text
    assert "PASS |" not in text.split("Checks that fail")[1]
    assert render_gates_markdown([]) == ""


def test_few_requests_decide_nothing(gates_of):
    # 5 requests a side: with the default floor (10) a p99 of 5 values is their maximum, no service
    # level, and a failed share of 5 requests moves by 20 points per request: unknown, never blocking
    g = gates_of(Config(), **pair_tables(stall_scale=1.5, n=5))
    spec = g[("spec", "latency")]
    assert [c["status"] for c in spec["checks"]] == ["unknown"] * 3
    assert check(spec, "max_stall_p99_ms")["reason"] == "a percentile of 5 requests (10 needed, [evidence] min_requests)"
    assert (check(spec, "max_stall_p99_ms")["n"], check(spec, "max_stall_p99_ms")["baseline_n"]) == (5, 5)
    assert check(g[("spec", "correctness")], "failed_share")["reason"] == (
        "a share of 5 requests (10 needed on both sides, [evidence] min_requests)")
    assert blocking_checks(list(g.values()), "spec") == []
    # the baseline's own checks too
    assert {c["status"] for c in g[("base", "latency")]["checks"]} == {"unknown"}
    # a floor of 5 lets them decide: both stalls past 250 (bins 434.85 and 291.49), the ratio
    # e^0.40 = 1.49 beyond 1 + 25 %
    g = gates_of(config("[evidence]\nmin_requests = 5"), **pair_tables(stall_scale=1.5, n=5))
    assert check(g[("spec", "latency")], "max_stall_p99_ms")["status"] == "fail"
