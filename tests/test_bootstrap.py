"""The 95 % bootstrap intervals (headline_intervals, docs/metrics.md "Intervals of the headline
numbers"): the request groups, the same buckets in every replicate, dropped replicates, the
seed, and the tpot_speedup interval.

The weights are Poisson(1) draws from a hash; a test that needs them reads them through the
view's own macros and recomputes the statistic with numpy, so what is checked is the
formula, the drop rule and the quantile, independently of the view's SQL.
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
from tracebuilder import at, deployment, lift_floors, no_floors_config, request, write_traces

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


def two_bucket_case(root):
    """Every request of spec runs one round at batch 1 (10 ms, 2 tokens) and one at batch 2
    (40 ms steps of two requests, 2 tokens each), so any weighting of spec's requests keeps
    its sums in proportion. base: 40 requests at batch 1 (10 ms, 1 token: t0(1) = 10 ms) and
    a single request w at batch 2 (20 steps of 20 ms: t0(2) = 20 ms).
    speedup = (10 · 20 + 20 · 20) / (10 · 10 + 10 · 40) = 600 / 500 = 1.2; bucket 1 alone
    would give 10 · 20 / 100 = 2.0."""
    b = Builder()
    for i in range(40):
        b.step("base", 10.0, [(f"b{i}", 0, 1)])
    for _ in range(20):
        b.step("base", 20.0, [("w", 0, 1)], batch_size=2)
    for i in range(10):
        b.step("spec", 10.0, [(f"s{i}", 4, 2)])
    for i in range(0, 10, 2):
        b.step("spec", 40.0, [(f"s{i}", 4, 2), (f"s{i + 1}", 4, 2)])
    return b.write(root, [deployment("spec"), deployment("base", "none")])


def test_every_replicate_covers_the_same_buckets_and_the_rest_are_dropped(tmp_path):
    root = two_bucket_case(tmp_path / "t")
    doc = report_json(root, "--config", str(no_floors_config(tmp_path)))   # w alone may give t0(2)
    spec = by_id(doc)["spec"]
    assert spec["speedup"] == pytest.approx(1.2)
    # a replicate that weighs w's group 0 has no t0 at batch 2: it is dropped, never computed
    # over bucket 1 alone (2.0), so every replicate used is 1.2
    assert spec["speedup_interval"] == [pytest.approx(1.2), pytest.approx(1.2)]
    ws = api.open_traces(root)
    try:
        lift_floors(ws.con)
        used = ws.con.execute("select speedup_replicates, replicates from headline_intervals "
                              "where deployment_id = 'spec'").fetchone()
        # the replicates in which w's group draws 0 (its weight, through the view's macros)
        (group,) = ws.con.execute("select request_group from request_rounds where request_id = 'w'").fetchone()
        zero = ws.con.execute("select count(*) from range(intervals_replicates()) as r(i) where "
                              "bootstrap_weight('base', i, ?, intervals_seed()) = 0", [group]).fetchone()[0]
    finally:
        ws.close()
    # every replicate that weighs w's group 0 is dropped; a few more are, where spec's own
    # groups in a bucket all draw 0 (its 10 requests fall in 10 groups: e^-10 each bucket)
    assert used[1] == REPLICATES and REPLICATES - zero - 10 <= used[0] <= REPLICATES - zero
    # Poisson(1) is 0 with probability 1/e: 5,886 of 16,000, σ = 61
    assert abs(zero - REPLICATES / np.e) < 4 * np.sqrt(REPLICATES * np.exp(-1) * (1 - np.exp(-1)))
    assert (f"spec: the speedup interval rests on {used[0]:,} of {REPLICATES:,} bootstrap replicates; "
            "the others resampled a covered bucket's baseline, or a denominator, to no tokens and were "
            "dropped") in doc["notes"]


def response_only(root):
    """Requests with timings only (as the response importers write them): 12 of spec and 12 of
    base, with different durations, so the interval is not a point."""
    spec = [request("spec", f"s{i}", first=10.0, finish=10.0 + 100 + 15 * i, output_tokens=21 + i)
            for i in range(12)]
    base = [request("base", f"b{i}", first=10.0, finish=10.0 + 300 + 20 * i, output_tokens=21 + 2 * i)
            for i in range(12)]
    return write_traces(root, deployments=[deployment("spec"), deployment("base", "none")],
                        requests=spec + base, rounds=[])


def test_the_tpot_speedup_interval_resamples_both_deployments_requests(tmp_path):
    root = response_only(tmp_path)
    spec = by_id(report_json(root))["spec"]
    ws = api.open_traces(root)
    try:
        rows = ws.con.execute("""select deployment_id, request_group(deployment_id, request_id, epoch_us(arrival_time)),
                                        date_diff('microsecond', first_token_time, finish_time), output_tokens - 1
                                 from requests""").fetchall()
        groups = {dep: sorted({g for d, g, _, _ in rows if d == dep}) for dep in ("spec", "base")}
        # the weights of each group in every replicate, through the view's macros (the types
        # as the view hashes them: varchar deployment, bigint replicate and group)
        weights = {dep: np.array([w for (w,) in ws.con.execute(
            "select list_transform(cast(? as bigint[]), lambda g: bootstrap_weight(cast(? as varchar), r, g, "
            "intervals_seed())) from range(intervals_replicates()) as t(r) order by r",
            [groups[dep], dep]).fetchall()]) for dep in ("spec", "base")}
    finally:
        ws.close()
    # per group: Σ (finish − first token) and Σ (output_tokens − 1); the replicates' weighted sums
    sums = {}
    for dep in ("spec", "base"):
        duration = np.zeros(len(groups[dep]))
        tokens = np.zeros(len(groups[dep]))
        for d, g, us, n in rows:
            if d == dep:
                duration[groups[dep].index(g)] += us
                tokens[groups[dep].index(g)] += n
        sums[dep] = (weights[dep] @ duration, weights[dep] @ tokens)
    (d_us, d_tok), (b_us, b_tok) = sums["spec"], sums["base"]
    ok = (d_tok > 0) & (b_tok > 0) & (d_us > 0)
    replicate = (b_us[ok] / b_tok[ok]) / (d_us[ok] / d_tok[ok])
    # 12 requests each: a replicate weighing all of one deployment's groups 0 is dropped
    expected = [np.quantile(replicate, 0.025), np.quantile(replicate, 0.975)]
    assert spec["tpot_speedup_interval"] == pytest.approx(expected, rel=1e-12)
    lo, hi = spec["tpot_speedup_interval"]
    assert lo < spec["tpot_speedup"] < hi


def test_another_seed_moves_a_printed_interval_by_its_last_digit_at_most(tmp_path, sample_report):
    config = tmp_path / "seed1.toml"
    config.write_text("[intervals]\nseed = 1\n")
    seed0 = sample_report["doc"]
    seed1 = report_json(SAMPLE, "--config", str(config))
    for metric in ("speedup", "mean_accept_length"):
        printed = {}
        for doc in (seed0, seed1):
            for d in doc["deployments"]:
                if d[metric] is not None and d["method"] != "none":
                    printed.setdefault(d["deployment_id"], []).append(
                        (with_interval(d[metric], *d[f"{metric}_interval"]), d[f"{metric}_interval"]))
        assert len(printed) == 4
        for dep, ((text0, raw0), (text1, raw1)) in printed.items():
            assert raw0 != raw1, (dep, metric)      # the seed draws other weights ...
            # ... and a printed endpoint moves by at most one unit of its last digit: 16,000
            # replicates put an endpoint's spread between seeds near 0.001 (docs/metrics.md)
            digits = len(text0.split("[")[1].split(",")[0].split(".")[1])
            for a, b in zip(raw0, raw1):
                assert abs(round(a, digits) - round(b, digits)) <= 10 ** -digits + 1e-12, (dep, metric, text0, text1)


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
