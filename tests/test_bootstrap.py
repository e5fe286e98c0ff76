"""The 95 % intervals (docs/metrics.md): the accept length's bootstrap over request groups
(headline_intervals: the groups, the weights, dropped replicates, the seed) and the speedups'
block jackknife over time (analyzer/analysis/uncertainty.py: rounds and tpot, by hand).

The bootstrap's weights are Poisson(1) draws from a hash; a test that needs them reads them
through the view's own macros and recomputes the statistic with numpy, so what is checked is
the formula, the drop rule and the quantile, independently of the view's SQL. The
jackknife's intervals are worked out by hand on traces of a few blocks.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.analysis.precision import with_interval
from analyzer.cli import main
from test_evidence import Builder
from tracebuilder import at, deployment, no_floors_config, request, write_traces

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces"
REPLICATES = 16000      # the default of [intervals] replicates


def md5_group(deployment_id: str, request_id: str, arrival_us: int | None = None) -> int:
    """The group docs/metrics.md defines: the first 32 bits of md5(deployment_id/request_id
    [/arrival time in µs since the epoch]) mod 256."""
    key = f"{deployment_id}/{request_id}" + ("" if arrival_us is None else f"/{arrival_us}")
    return int(hashlib.md5(key.encode()).hexdigest()[:8], 16) % 256


def report_json(root, *args) -> dict:
    result = CliRunner().invoke(main, ["report", str(root), "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def by_id(doc: dict) -> dict[str, dict]:
    return {d["deployment_id"]: d for d in doc["deployments"]}


def test_a_request_and_its_rounds_get_the_group_of_its_key(tmp_path):
    # r1 arrives 250 ms after the fixed instant of `at`; r2's requests row is rejected (first
    # token before arrival), so its rounds count without one and take the group of their key
    arrival_us = int(at(250).timestamp() * 1_000_000)
    root = write_traces(tmp_path, deployments=[deployment("d")],
                        requests=[request("d", "r1", arrival=250.0, first=260.0, finish=300.0),
                                  request("d", "r2", arrival=50.0, first=10.0)],
                        rounds=[{"deployment_id": "d", "request_id": rid, "round_idx": 0, "num_draft_tokens": 2,
                                 "num_accepted_tokens": 1, "num_committed_tokens": 2} for rid in ("r1", "r2")])
    ws = api.open_traces(root)
    try:
        assert ws.con.execute("select row_key, reason from rejected_rows").fetchall() == [
            ("deployment_id=d, request_id=r2", "time_order")]
        groups = dict(ws.con.execute("select request_id, request_group from request_rounds").fetchall())
        cells = ws.con.execute("select request_group, num_accepted_tokens from request_group_cells "
                               "order by request_group").fetchall()
    finally:
        ws.close()
    assert groups == {"r1": md5_group("d", "r1", arrival_us), "r2": md5_group("d", "r2")}
    assert cells == sorted([(groups["r1"], 1), (groups["r2"], 1)])


def test_requests_that_share_an_id_in_two_partitions_are_two_requests_of_their_own_groups(tmp_path):
    requests = {f"date=2026-11-2{d}": [request("d", "r", arrival=float(d))] for d in (7, 8)}
    rounds = {f"date=2026-11-2{d}": [{"deployment_id": "d", "request_id": "r", "round_idx": 0,
                                      "num_draft_tokens": 2, "num_accepted_tokens": 1, "num_committed_tokens": 2}]
              for d in (7, 8)}
    ws = api.open_traces(write_traces(tmp_path, deployments=[deployment("d")], requests=requests, rounds=rounds))
    try:
        groups = sorted(g for (g,) in ws.con.execute("select request_group from request_rounds").fetchall())
    finally:
        ws.close()
    assert groups == sorted(md5_group("d", "r", int(at(d).timestamp() * 1_000_000)) for d in (7, 8))


def test_every_replicate_weighs_the_same_groups_and_one_without_speculative_rounds_is_dropped(tmp_path):
    """The accept length's bootstrap (headline_intervals): in each of the 16,000 replicates
    every request group of the deployment gets its Poisson(1) weight (bootstrap_weight), the
    accept length is 1 + Σ w · accepted / Σ w · speculative rounds, and a replicate whose
    speculative rounds weigh nothing (every group drew 0) is dropped, never counted as 1."""
    # r1: three speculative rounds accepting 1, 2 and 3; r2: two accepting none
    rounds = [{"deployment_id": "spec", "request_id": rid, "round_idx": i, "num_draft_tokens": 4,
               "num_accepted_tokens": k, "num_committed_tokens": k + 1}
              for rid, accepted in (("r1", (1, 2, 3)), ("r2", (0, 0))) for i, k in enumerate(accepted)]
    root = write_traces(tmp_path / "t", deployments=[deployment("spec")], rounds=rounds)
    groups = [md5_group("spec", "r1"), md5_group("spec", "r2")]     # no requests rows: the key alone
    assert groups[0] != groups[1]
    ws = api.open_traces(root)
    try:
        row = ws.con.execute("select replicates, accept_length_replicates from headline_intervals").fetchone()
        weights = np.array([w for (w,) in ws.con.execute(
            "select list_transform(cast(? as bigint[]), lambda g: bootstrap_weight('spec', r, g, intervals_seed())) "
            "from range(intervals_replicates()) as t(r) order by r", [groups]).fetchall()])
    finally:
        ws.close()
    spec = by_id(report_json(root))["spec"]
    # point: 1 + (1 + 2 + 3) / (3 + 2) = 2.2
    assert spec["mean_accept_length"] == pytest.approx(2.2, rel=1e-12)
    spec_rounds = weights @ np.array([3.0, 2.0])
    accepted = weights @ np.array([6.0, 0.0])
    used = spec_rounds > 0
    # both groups draw 0 with probability e^-2: about 2,165 of 16,000 replicates dropped (σ = 43)
    assert row == (REPLICATES, int(used.sum()))
    assert abs((~used).sum() - REPLICATES * np.exp(-2)) < 4 * np.sqrt(REPLICATES * np.exp(-2) * (1 - np.exp(-2)))
    replicate = 1 + accepted[used] / spec_rounds[used]
    # the used replicates' 2.5 % and 97.5 % quantiles, linear between order statistics (quantile_cont)
    assert spec["mean_accept_length_interval"] == pytest.approx(
        [np.quantile(replicate, 0.025), np.quantile(replicate, 0.975)], rel=1e-12)


def test_a_deletion_that_empties_a_baseline_cell_keeps_the_cells_value(tmp_path):
    """The speedup's interval is a block jackknife (analysis/uncertainty.py): each side's
    blocks of time deleted in turn, the other held whole, the load mix held fixed. Every step
    here is a block of its own (fewer than 256 steps) and with fewer than 8 blocks that move
    the speedup each is its own coarse block, so it is the delete-one jackknife.

    base: batch 1, steps of 8, 12, 8, 12 ms (1 token each): t0(1) = 40 / 4 = 10 ms; one step
    at batch 2, 20 ms for 1 token: t0(2) = 20 ms, the cell's only block.
    spec: batch 1, four 10 ms steps committing 2, 3, 2, 3: counterfactual 10 · 10 = 100 over
    40 ms, 2.5; batch 2, two 40 ms steps of two rounds committing 2 each: 8 tokens · 20 = 160
    over 2 · 2 · 40 = 160 ms, 1.0. speedup = 260 / 200 = 1.3, with the time shares 0.2 and 0.8
    that each replicate keeps: 0.2 · (batch 1's speedup) + 0.8 · (batch 2's)."""
    b = Builder()
    b.step("base", 8.0, [("b0", 0, 1)])
    b.step("base", 12.0, [("b1", 0, 1)])
    b.step("base", 20.0, [("w", 0, 1)], batch_size=2)
    b.step("base", 8.0, [("b2", 0, 1)])
    b.step("base", 12.0, [("b3", 0, 1)])
    b.step("spec", 10.0, [("s0", 4, 2)])
    b.step("spec", 10.0, [("s1", 4, 3)])
    b.step("spec", 40.0, [("s4", 4, 2), ("s5", 4, 2)])
    b.step("spec", 40.0, [("s6", 4, 2), ("s7", 4, 2)])
    b.step("spec", 10.0, [("s2", 4, 2)])
    b.step("spec", 10.0, [("s3", 4, 3)])
    root = b.write(tmp_path / "t", [deployment("spec"), deployment("base", "none")])
    doc = report_json(root, "--config", str(no_floors_config(tmp_path)))
    spec = by_id(doc)["spec"]
    assert spec["speedup"] == pytest.approx(1.3, rel=1e-12)
    # spec's deletions: a batch-1 step of 2 tokens leaves 80 / 30 = 8/3 there, one of 3 leaves
    # 70 / 30 = 7/3: speedup 0.2 · 8/3 + 0.8 = 4/3 or 0.2 · 7/3 + 0.8 = 19/15. A batch-2 step's
    # deletion leaves batch 2 at 1.0: it does not move the speedup and joins the block before it.
    # base's deletions: an 8 ms step leaves t0(1) = 32/3, a 12 ms one 28/3: batch 1 at
    # (32/3) · 10 / 40 = 8/3 or 7/3, the same 4/3 or 19/15. Deleting the batch-2 step empties
    # cell 2, which keeps its full-sample t0 of 20 ms: the speedup stays 1.3 (it is never
    # computed over batch 1 alone, 2.5).
    # Each side: K = 4 blocks, θ_(i) = ln 4/3, ln 19/15 twice each, ½ ln(20/19) from their mean:
    # V = (K − 1)/K · Σ (θ_(i) − θ̄)² = 3/4 · 4 · ¼ · ln²(20/19) = ¾ ln²(20/19) = 0.0019733.
    # Welch df = (2V)² / (V²/3 + V²/3) = 6, t(0.975, 6) = 2.4469119 (tables);
    # interval = 1.3 · exp(± 2.4469119 · √(3/2) · ln(20/19)) = 1.3 · exp(± 0.153718)
    v = 0.75 * np.log(20 / 19) ** 2
    half = 2.4469118511 * np.sqrt(2 * v)
    matched = spec["matched"]["rounds"]
    assert matched["blocks"] == {"deployment": 4, "baseline": 4}
    assert matched["block_length"] == {"deployment": 1, "baseline": 1}
    assert matched["variance"] == {"deployment": pytest.approx(v, rel=1e-9), "baseline": pytest.approx(v, rel=1e-9)}
    assert matched["df"] == pytest.approx(6.0, rel=1e-9)
    assert spec["speedup_interval"] == pytest.approx([1.3 * np.exp(-half), 1.3 * np.exp(half)], rel=1e-9)
    # per bucket: batch 1 alone, 2.5 with deletions 8/3 or 7/3 on each side: V = ¾ ln²(8/7), df 6;
    # no block moves batch 2 (its steps all give 1.0, its baseline cell is one block): no interval
    curve = {c["batch_bucket"]: c["speedup_interval"] for c in doc["load_curve"] if c["deployment_id"] == "spec"}
    half_1 = 2.4469118511 * np.sqrt(1.5) * np.log(8 / 7)
    assert curve == {"1": pytest.approx([2.5 * np.exp(-half_1), 2.5 * np.exp(half_1)], rel=1e-9), "2": None}


def timings_only(root):
    """Requests with timings only (as the response importers write them), one at a time on
    each deployment, so each decoded alone: load 1.0 (request_loads), every request its own
    block of time. base: 10 tokens after the first in 80, 120, 80, 120 ms: tpot(1) = 400 / 40
    = 10 ms. spec: 20, 30, 20, 30 tokens in 100 ms each: 10 · 100 / 400 = 2.5."""
    spec = [request("spec", f"s{i}", arrival=1000.0 * i, first=1000.0 * i + 10, finish=1000.0 * i + 110,
                    output_tokens=1 + n) for i, n in enumerate((20, 30, 20, 30))]
    base = [request("base", f"b{i}", arrival=1000.0 * i, first=1000.0 * i + 10, finish=1000.0 * i + 10 + ms,
                    output_tokens=11) for i, ms in enumerate((80, 120, 80, 120))]
    return write_traces(root, deployments=[deployment("spec"), deployment("base", "none")],
                        requests=spec + base, rounds=[])


def test_the_tpot_speedup_interval_deletes_each_deployments_blocks_of_requests(tmp_path):
    root = timings_only(tmp_path / "t")
    spec = by_id(report_json(root, "--config", str(no_floors_config(tmp_path))))["spec"]
    assert spec["tpot_speedup"] == pytest.approx(2.5, rel=1e-12)
    # spec's deletions: a 20-token request leaves 10 · 80 / 300 = 8/3, a 30-token one 7/3;
    # base's: an 80 ms request leaves tpot (400 − 80) / 30 = 32/3, so 32/3 · 100 / 400 = 8/3,
    # a 120 ms one 7/3. Each side: K = 4, V = ¾ ln²(8/7) = 0.0133729, both sides alike, so
    # Welch df = 6, t(0.975, 6) = 2.4469119: 2.5 · exp(± 2.4469119 · √(3/2) · ln(8/7))
    # = [1.6755, 3.7302]
    v = 0.75 * np.log(8 / 7) ** 2
    half = 2.4469118511 * np.sqrt(2 * v)
    matched = spec["matched"]["tpot"]
    assert matched["loads"] == [1.0, 1.0] and matched["baseline_loads"] == [1.0, 1.0]
    assert matched["blocks"] == {"deployment": 4, "baseline": 4}
    assert matched["variance"] == {"deployment": pytest.approx(v, rel=1e-9), "baseline": pytest.approx(v, rel=1e-9)}
    assert matched["df"] == pytest.approx(6.0, rel=1e-9)
    assert spec["tpot_speedup_interval"] == pytest.approx([2.5 * np.exp(-half), 2.5 * np.exp(half)], rel=1e-9)
    assert spec["tpot_speedup_interval"] == pytest.approx([1.6755, 3.7302], abs=1e-4)


def test_another_seed_moves_a_printed_interval_by_its_last_digit_at_most(tmp_path, sample_report):
    config = tmp_path / "seed1.toml"
    config.write_text("[intervals]\nseed = 1\n")
    seed0 = sample_report["doc"]
    seed1 = report_json(SAMPLE, "--config", str(config))
    # the speedups' intervals are a block jackknife: no draw, so the seed changes nothing,
    # to the last bit, for every basis that has one
    speedups = {}
    for doc in (seed0, seed1):
        for d in doc["deployments"]:
            if d["method"] != "none":
                speedups.setdefault(d["deployment_id"], []).append(
                    {basis: m["interval"] for basis, m in d["matched"].items()})
    assert len(speedups) == 4
    assert sum(interval is not None for s0, _ in speedups.values() for interval in s0.values()) >= 4
    for dep, (s0, s1) in speedups.items():
        assert s0 == s1, dep
    # the accept length's is a bootstrap over request groups: the seed draws other weights ...
    printed = {}
    for doc in (seed0, seed1):
        for d in doc["deployments"]:
            if d["mean_accept_length"] is not None and d["method"] != "none":
                printed.setdefault(d["deployment_id"], []).append(
                    (with_interval(d["mean_accept_length"], *d["mean_accept_length_interval"]),
                     d["mean_accept_length_interval"]))
    assert len(printed) == 4
    for dep, ((text0, raw0), (text1, raw1)) in printed.items():
        assert raw0 != raw1, dep
        # ... and a printed endpoint moves by at most one unit of its last digit: 16,000
        # replicates put an endpoint's spread between seeds near 0.001 (docs/metrics.md)
        digits = len(text0.split("[")[1].split(",")[0].split(".")[1])
        for a, b in zip(raw0, raw1):
            assert abs(round(a, digits) - round(b, digits)) <= 10 ** -digits + 1e-12, (dep, text0, text1)


def bootstrap_weights(replicates: int, groups: int, deployment_id: str = "spec", seed: int = 0) -> np.ndarray:
    """The weights headline_intervals draws, replicates × groups, through its own macro."""
    ws = api.open_traces(SAMPLE, views=True)
    try:
        rows = ws.con.execute(
            "select r, list(bootstrap_weight(?, r, g, ?) order by g) from range(?) as a(r), range(?) as b(g) "
            "group by r order by r", [deployment_id, seed, replicates, groups]).fetchall()
    finally:
        ws.close()
    return np.array([w for _, w in rows])


def test_bootstrap_weights_of_different_groups_are_independent_and_every_replicate_is_distinct():
    # 4,000 replicates over 256 groups, as headline_intervals draws them. Independent Poisson(1)
    # draws have mean 1 and variance 1; two groups' weights correlate at r ~ N(0, 1/4000), so
    # the mean |r| over the 32,640 pairs is about sqrt(2/pi)/sqrt(4000) = 0.0126, and no pair
    # is far out (6 standard errors: 0.095). The weights of the XOR-folded hash, group last,
    # correlated at |r| = 0.58 on average and repeated one pattern: 1,115 distinct vectors
    # of 16,000.
    w = bootstrap_weights(4000, 256)
    assert abs(w.mean() - 1) < 0.01 and abs(w.var() - 1) < 0.02
    r = np.corrcoef(w.T)[np.triu_indices(256, 1)]
    assert abs(np.abs(r).mean() - 0.0126) < 0.002
    assert np.abs(r).max() < 6 / np.sqrt(4000)
    assert len({tuple(row) for row in w}) == 4000
    # the seed draws other weights, as independent of the first ones
    other = bootstrap_weights(4000, 256, seed=1)
    assert abs(np.corrcoef(w.ravel(), other.ravel())[0, 1]) < 6 / np.sqrt(w.size)
