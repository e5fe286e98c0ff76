"""The decision on traces whose true speedup is a closed form (analyzer/simulate/closed_form.py).

Every case of issue 36's list, each a trace whose step costs are formulas, so the truth
is known: plain step A + S·b + c·X, speculative step A + S·b·(γ+1) + D·γ + c·X, and
acceptance a per position (E[L] = (1 − a^(γ+1)) / (1 − a)). The tests check the verdict,
not only the numbers: the action, what it is matched on, and what it names.

Costs (ms) unless a test says otherwise: A = 6, S = 0.05, D = 0.4, c = 0, so
    T0(b) = 6 + 0.05 b,  T(b) = 6 + 0.25 b + 1.6 at γ = 4.
"""

from __future__ import annotations

import math
import tomllib

import numpy as np
import pytest

from analyzer import api
from analyzer.analysis import uncertainty
from analyzer.analysis.config import parse_config
from analyzer.decide.gates import share_difference
from analyzer.simulate import closed_form as cf

COSTS = cf.Costs(fixed_ms=6.0, per_position_ms=0.05, per_draft_ms=0.4)


def report(tmp_path, sides, config_text: str = "", **options):
    """The report document of a closed-form trace, and each side's SideTrace."""
    config = parse_config(tomllib.loads(config_text), source="test.toml")
    traces = cf.write(tmp_path / "traces", sides, **options)
    with api.open_traces(tmp_path / "traces") as ws:
        doc = api.report_document(ws, config=config)
    return doc, traces


def verdict(doc, dep="spec"):
    return next(v for v in doc["verdict"] if v["deployment_id"] == dep)


def entry(doc, dep="spec"):
    return next(d for d in doc["deployments"] if d["deployment_id"] == dep)


def check_of(doc, name, dep="spec"):
    return next(c for g in doc["gates"] if g["deployment_id"] == dep for c in g["checks"] if c["name"] == name)


# --------------------------------------------------------------------------- the closed forms


def test_the_closed_form_is_the_seeds_formula():
    # E[L] at a = 0.8, γ = 4: 1 + 0.8 + 0.64 + 0.512 + 0.4096 = 3.3616 (the seed's table);
    # at batch 1: T0 = 6.05, T = 6 + 0.25 + 1.6 = 7.85, speedup 6.05 · 3.3616 / 7.85 = 2.5907...
    assert cf.expected_length(0.8, 4) == pytest.approx(3.3616)
    assert cf.closed_form_speedup(COSTS, 0.8, 4, 1) == pytest.approx(6.05 * 3.3616 / 7.85)
    # the seed's 2.334: cheap costs, T0 = 1, T = 1 + 4 · 0.05 + ... the ratio E[L] · T0 / T
    seed = cf.Costs(fixed_ms=1.0, per_position_ms=0.0, per_draft_ms=0.1)
    assert cf.closed_form_speedup(seed, 0.8, 4, 1) == pytest.approx(3.3616 / 1.4)


# --------------------------------------------------------------------------- like with like: load


def test_a_baseline_that_never_ran_at_the_deployments_load_decides_nothing(tmp_path):
    # base only at batch 120, spec at 70 (both in bucket 65-128): a bucket label is no match.
    # T0(70) = 9.5, T(70) = 25.1, E[L](0.6) = 2.3056: the truth at 70 is 0.873, but base never
    # ran there, so the verdict can only say so
    doc, _ = report(tmp_path, [cf.Side("base", (cf.Phase(120, 300),), costs=COSTS),
                               cf.Side("spec", (cf.Phase(70, 300),), gamma=4, acceptance=0.6, costs=COSTS)])
    v = verdict(doc)
    assert v["action"] == "inconclusive"
    assert "not matched on load, it ran at batch 70 and base at batch 120" in v["text"]
    assert v["speedup"] is None
    assert "base measured at batch 70, where spec ran, would settle it" in v["text"]


def test_the_speedup_is_matched_at_each_steps_own_batch_size(tmp_path):
    # base ran batch 40-128 (every 4th size, 60 steps each) and mostly 120; spec at 70 only.
    # The counterfactual at 70 interpolates base's cells 65-72 and 73-80, exact for a cost
    # linear in b: the truth, T0(70) · tokens / T(70) · rounds over spec's steps, is below 1
    # (0.873 at E[L] without stop truncation), so it must not ship
    base = tuple(cf.Phase(b, 60) for b in range(40, 129, 4)) + (cf.Phase(120, 600),)
    doc, traces = report(tmp_path, [cf.Side("base", base, costs=COSTS),
                                    cf.Side("spec", (cf.Phase(70, 400),), gamma=4, acceptance=0.6, costs=COSTS)])
    truth = cf.true_speedup(traces["spec"])
    assert truth == pytest.approx(9.5 * 2.3056 / 25.1, rel=0.02)
    d = entry(doc)
    assert d["speedup"] == pytest.approx(truth, rel=0.01)
    assert d["speedup_interval"][0] <= truth <= d["speedup_interval"][1]
    assert d["speedup_coverage"] == 1.0
    v = verdict(doc)
    assert v["action"] == "dont_ship"
    assert "at the same batch sizes and contexts" in v["text"] and "slower than plain decoding" in v["text"]


def test_reversed_loads_the_baseline_below_and_the_deployment_above(tmp_path):
    # base at batch 40 only, spec at 64: outside every load base measured (its cell 33-36... 37-40
    # holds 40 alone): inconclusive, naming both; with base also at 60-68 the same spec ships
    # (T0(64) = 9.2, T(64) = 23.6, E[L](0.8) = 3.3616: 1.31)
    doc, _ = report(tmp_path / "a", [cf.Side("base", (cf.Phase(40, 400),), costs=COSTS),
                                     cf.Side("spec", (cf.Phase(64, 300),), gamma=4, acceptance=0.8, costs=COSTS)])
    v = verdict(doc)
    assert v["action"] == "inconclusive" and "batch 64 and base at batch 40" in v["text"]
    doc, traces = report(tmp_path / "b", [
        cf.Side("base", (cf.Phase(40, 400), cf.Phase(60, 200), cf.Phase(68, 200)), costs=COSTS),
        cf.Side("spec", (cf.Phase(64, 300),), gamma=4, acceptance=0.8, costs=COSTS)])
    truth = cf.true_speedup(traces["spec"])
    assert truth == pytest.approx(9.2 * 3.3616 / 23.6, rel=0.03)
    d = entry(doc)
    assert d["speedup_interval"][0] <= truth <= d["speedup_interval"][1]
    assert verdict(doc)["action"] == "ship"


# --------------------------------------------------------------------------- like with like: context


CONTEXT_COSTS = cf.Costs(fixed_ms=6.0, per_position_ms=0.05, per_draft_ms=0.4, per_context_ms=0.0002)


def test_contexts_the_baseline_never_held_are_not_matched(tmp_path):
    # both at batch 32; base's prompts 3,800-4,200 tokens, spec's 400-600. A step's cost rises
    # with the context in the batch (c = 0.0002 ms/token: 32 × 4,000 tokens add 25.6 ms), so a
    # t0 measured at 4k would flatter spec. Its steps hold 400-900 tokens a request, outside
    # base's range widened by 25 %: nothing is matched, and the verdict says where
    doc, _ = report(tmp_path, [
        cf.Side("base", (cf.Phase(32, 800),), costs=CONTEXT_COSTS, prompt_tokens=(3800, 4200)),
        cf.Side("spec", (cf.Phase(32, 800),), gamma=4, acceptance=0.6, costs=CONTEXT_COSTS,
                prompt_tokens=(400, 600))])
    v = verdict(doc)
    assert v["action"] == "inconclusive"
    uncovered = entry(doc)["uncovered_buckets"]
    assert [(u["reason"], u["committed_share"]) for u in uncovered] == [("context_out_of_range", pytest.approx(1.0))]
    assert any("at contexts the baseline's steps never held there" in n for n in doc["notes"])


def test_the_context_term_matches_a_step_at_its_own_context(tmp_path):
    # base ran batch 32 at prompts of 400-600 and of 3,800-4,200; spec at 400-600 only. Each of
    # spec's steps gets base's time at its own context (the pooled slope within the cell):
    # the truth on spec's traffic, T0(32, X) · tokens / T(32, X) · rounds, is what it finds
    doc, traces = report(tmp_path, [
        cf.Side("base", (cf.Phase(32, 800, (400, 600)), cf.Phase(32, 800, (3800, 4200))), costs=CONTEXT_COSTS),
        cf.Side("spec", (cf.Phase(32, 800),), gamma=4, acceptance=0.6, costs=CONTEXT_COSTS,
                prompt_tokens=(400, 600))])
    truth = cf.true_speedup(traces["spec"])
    d = entry(doc)
    assert d["speedup"] == pytest.approx(truth, rel=0.01)
    assert d["speedup_interval"][0] <= truth <= d["speedup_interval"][1]
    assert d["matched"]["rounds"]["context_known"] is True
    assert verdict(doc)["matched_on"] == ["load", "context"]


def test_without_context_lengths_different_prompts_are_not_matched(tmp_path):
    # the same trace as the first context test, its rounds without context_len: nothing says
    # what the steps held, and the median prompts (about 4,000 against 500) lie more than
    # 25 % apart, so the verdict can't ship on it: the comparison is not matched on context
    doc, _ = report(tmp_path, [
        cf.Side("base", (cf.Phase(32, 800),), costs=CONTEXT_COSTS, prompt_tokens=(3800, 4200)),
        cf.Side("spec", (cf.Phase(32, 800),), gamma=4, acceptance=0.6, costs=CONTEXT_COSTS,
                prompt_tokens=(400, 600))], context_lengths=False)
    v = verdict(doc)
    assert v["action"] == "inconclusive"
    assert "not matched on context" in v["text"]
    assert v["not_matched"][0]["on"] == "context"


# --------------------------------------------------------------------------- request timings alone


def test_request_timings_alone_compare_at_the_concurrency_each_side_ran(tmp_path):
    # no steps: spec (a = 0.4, D = 1.0) at batch 8, base at 64: a pooled TPOT ratio would be
    # 23% of base's slower per-token rate at 64. The concurrency from the timings says spec
    # ran at 8 and base at 64, never comparable: inconclusive, naming both
    costs = cf.Costs(fixed_ms=6.0, per_position_ms=0.05, per_draft_ms=1.0)
    doc, _ = report(tmp_path / "a", [cf.Side("base", (cf.Phase(64, 300),), costs=costs),
                                     cf.Side("spec", (cf.Phase(8, 1200),), gamma=4, acceptance=0.4, costs=costs)],
                    with_steps=False)
    v = verdict(doc)
    assert v["basis"] == "tpot" and v["action"] == "inconclusive"
    assert "concurrency 8 and base at concurrency 64" in v["text"]
    # with base at 7 and 9 as well the same spec is matched at 8 (interpolated): the truth,
    # T0(8) · E[L] / T(8) = 6.4 · 1.6496 / 12 = 0.880 up to stop truncation, is slower
    doc, traces = report(tmp_path / "b", [
        cf.Side("base", (cf.Phase(7, 800), cf.Phase(9, 800), cf.Phase(64, 300)), costs=costs),
        cf.Side("spec", (cf.Phase(8, 1200),), gamma=4, acceptance=0.4, costs=costs)], with_steps=False)
    truth = cf.true_speedup(traces["spec"])
    assert truth == pytest.approx(6.4 * 1.6496 / 12, rel=0.03)
    d = entry(doc)
    assert d["tpot_speedup_interval"][0] <= truth <= d["tpot_speedup_interval"][1]
    assert verdict(doc)["action"] == "dont_ship"


# --------------------------------------------------------------------------- latency


def test_a_speculative_round_inside_the_stall_target_passes_whatever_its_ratio(tmp_path):
    # base and EAGLE γ=4 both at batch 4: a speculative step, 6 + 1 + 1.6 = 8.6 ms against a
    # plain 6.2 ms, stalls 39 % longer by design, far inside the 250 ms target: it passes and
    # the deployment ships (truth 6.2 · 3.3616 / 8.6 = 2.42)
    doc, traces = report(tmp_path, [cf.Side("base", (cf.Phase(4, 3000),), costs=COSTS),
                                    cf.Side("spec", (cf.Phase(4, 1200),), gamma=4, acceptance=0.8, costs=COSTS)])
    stall = check_of(doc, "max_stall_p99_ms")
    assert stall["status"] == "pass" and stall["interval"][1] < 250
    assert stall["ratio"] > 1.25           # worse than base by more than the tolerance, inside the target
    v = verdict(doc)
    assert v["action"] == "ship" and v["blocking"] == []
    assert v["speedup_interval"][0] <= cf.true_speedup(traces["spec"]) <= v["speedup_interval"][1]


def test_latency_at_different_loads_is_not_blamed_on_speculation(tmp_path):
    # a TPOT p95 target of 8 ms. spec at batch 64 decodes a token in about T(64) / E[L] =
    # 23.6 / 2.3056 = 10.2 ms, past the target. base ran at batch 8 only (6.4 ms): that is a
    # load difference, not speculation's doing, so the check is unknown, not failed.
    target = "[gates.latency]\ntpot_p95_ms = 8\ntpot_p95_ms_max_worsening = 0.5\n"
    doc, _ = report(tmp_path / "a", [cf.Side("base", (cf.Phase(8, 4000),), costs=COSTS),
                                     cf.Side("spec", (cf.Phase(64, 400),), gamma=4, acceptance=0.6, costs=COSTS)],
                    target)
    tpot = check_of(doc, "tpot_p95_ms")
    assert tpot["status"] == "unknown" and "not matched on load" in tpot["reason"]
    assert "tpot_p95_ms" not in [b["check"] for b in verdict(doc)["blocking"]]
    # with base at 64 as well: at the same load every base request takes T0(64) = 9.2 ms a
    # token, past the target too. spec's requests vary with their acceptance, so its p95 lies
    # above its mean of 10.2 ms; within a tolerance of 50 % the two miss it alike: shared,
    # never a block
    doc, _ = report(tmp_path / "b", [cf.Side("base", (cf.Phase(8, 4000), cf.Phase(64, 800)), costs=COSTS),
                                     cf.Side("spec", (cf.Phase(64, 400),), gamma=4, acceptance=0.6, costs=COSTS)],
                    target)
    tpot = check_of(doc, "tpot_p95_ms")
    assert tpot["status"] == "shared" and tpot["matched_share"] == 1.0
    assert tpot["baseline_value"] == pytest.approx(9.2, rel=0.01)   # within its 1 % bin
    assert 10.2 / 9.2 < tpot["ratio"] < 1.5 and tpot["ratio_interval"][1] <= 1.5


def test_failed_requests_block_only_when_the_rise_is_shown(tmp_path):
    # 0 failed of 12 baseline requests against 17 of 800: with equal rates 0 of 12 is likely
    # (0.979^12 = 0.77). The exact one-sided 95 % upper bound of 0/12 is 1 − 0.05^(1/12) = 22.1 %,
    # so the rise's lower bound is far below 1 point: no block
    lo, hi = share_difference(17, 800, 0, 12)
    assert lo < 0 < 0.01 < hi
    assert share_difference(0, 12, 0, 12) == pytest.approx((-(1 - 0.05 ** (1 / 12)), 1 - 0.05 ** (1 / 12)),
                                                           rel=1e-9)
    # 120 of 800 against 10 of 800: a rise of 13.75 points, its lower bound well above 1
    lo, hi = share_difference(120, 800, 10, 800)
    assert lo > 0.1 and hi < 0.17


def test_the_rise_bound_blocks_a_rise_of_exactly_the_tolerance_in_at_most_5_of_100(tmp_path):
    # a true rise of exactly the 1-point tolerance, 1 % against 0 % and 6 % against 5 %, drawn 1,000
    # times per size: a one-sided 95 % bound may block in 5 % of draws at most. Small counts are where
    # score bounds fail (Wilson's blocked 1 of 20 against 0 of 300 in 18.8 % of such draws)
    rng = np.random.default_rng(36)
    for n1, n2, base in ((20, 300, 0.0), (12, 800, 0.0), (100, 600, 0.0), (600, 600, 0.05)):
        x1 = rng.binomial(n1, base + 0.01, 1000)
        x2 = rng.binomial(n2, base, 1000)
        bounds = {}
        blocked = sum(bounds.setdefault((a, b), share_difference(int(a), n1, int(b), n2)[0] > 0.01)
                      for a, b in zip(x1, x2))
        assert blocked <= 50 + 3 * math.sqrt(1000 * 0.05 * 0.95), (n1, n2, blocked)


# --------------------------------------------------------------------------- configs


def test_a_range_without_a_baseline_is_off_until_measured(tmp_path):
    # base only at batch 8. spec ran batch 8 (where it pays: T0(8) = 6.4, T(8) = 9.6,
    # E[L](0.7) = 2.7731: 1.85) and batch 100 (no baseline there). The config turns
    # speculation off at 9 and above; the verdict says why, and quotes the config's speedup
    doc, traces = report(tmp_path, [cf.Side("base", (cf.Phase(8, 3000),), costs=COSTS),
                                    cf.Side("spec", (cf.Phase(8, 2500), cf.Phase(100, 150)), gamma=4,
                                            acceptance=0.7, costs=COSTS)])
    v = verdict(doc)
    assert v["action"] == "cap"
    # batch 1-4 (never ran, below a bucket that pays) keep its k; 9-64 (never ran, above every
    # bucket that pays) and 65-128 (no baseline) are off
    assert v["config"] == [[1, 8, 4], [9, 128, 0]]
    assert v["coverage"] == pytest.approx(0.57, abs=0.02)
    assert "no baseline at batch 65-128: speculation off there until base is measured there" in v["text"]
    batch8 = traces["spec"].step_batch == 8
    truth = cf.true_speedup(traces["spec"], batch8)
    assert v["config_speedup"] == pytest.approx(truth, rel=0.01)
    assert f"{v['config_speedup']:.2f}" in v["text"] or f"{v['config_speedup']:.3f}"[:4] in v["text"]


# --------------------------------------------------------------------------- intervals


def _pair(rng, n_blocks_d=256, n_blocks_b=256, drift=0.0, period=16):
    """A MatchedPair of one load cell, its sums drawn per block: the deployment's tokens and
    time, the baseline's; the truth of the statistic is ``ratio`` = 1.5."""
    def side(n, mean_time_per_token):
        levels = np.repeat(rng.uniform(1 - drift, 1 + drift, n // period + 1), period)[:n] if drift else np.ones(n)
        tokens = rng.poisson(200, n).astype(float) + 1
        time = tokens * mean_time_per_token * levels * rng.lognormal(0, 0.05, n)
        return tokens, time
    td, yd = side(n_blocks_d, 4.0)     # the deployment: 4 ms per token
    tb, yb = side(n_blocks_b, 6.0)     # the baseline: 6 ms per token: truth 6 / 4 = 1.5
    d = np.stack([td, yd, np.zeros_like(td)], axis=1)[:, None, :]
    b = np.stack([tb, yb, np.zeros_like(tb), np.zeros_like(tb), np.zeros_like(tb)], axis=1)[:, None, :]
    return uncertainty.MatchedPair(d, b, np.array([0]), np.array([-1]), np.array([1.0]), np.array([0.0]), False)


@pytest.mark.parametrize("drift", [0.0, 0.05])
def test_the_jackknife_interval_holds_the_truth_in_about_95_of_100_seeds(drift):
    # 200 seeds of a statistic whose truth is 1.5: the share of intervals that hold it is
    # Binomial(200, 0.95) if they hold their 95 % (sd 1.5 points): between 90 % and 99 %
    # passes. With the level drifting in stretches of 16 of 256 blocks the blocks must
    # grow to hold it (at most 10 coarse blocks a side, of 25.6 fine blocks)
    held = 0
    for seed in range(200):
        found = uncertainty.matched_interval(_pair(np.random.default_rng(seed), drift=drift))
        lo, hi = found.interval["all"]
        held += lo <= 1.5 <= hi
    assert 180 <= held <= 198


def test_a_thin_side_is_named_as_the_short_one(tmp_path):
    # a baseline of 12 requests of 18-22 tokens (about 240 steps at batch 1, 10 % step noise)
    # against 190 requests of the deployment (16,000 steps, 2 % noise), whose speedup is near
    # 1 (a = 0.24: E[L] = 1.3147, T0 · E[L] / T = 6.05 · 1.3147 / 7.85 = 1.013): the interval
    # includes 1, and the baseline's variance dominates it, so "what would settle it" asks
    # for more of the baseline's requests, not of the deployment's
    doc, traces = report(tmp_path, [
        cf.Side("base", (cf.Phase(1, 240),), costs=COSTS, output_tokens=(18, 22), noise=0.10),
        cf.Side("spec", (cf.Phase(1, 16000),), gamma=4, acceptance=0.24, costs=COSTS)])
    assert cf.true_speedup(traces["spec"]) == pytest.approx(1.013, abs=0.005)
    d = entry(doc)
    variance = d["matched"]["rounds"]["variance"]
    assert variance["baseline"] > variance["deployment"]
    v = verdict(doc)
    assert v["action"] == "inconclusive"
    assert "its baseline is the short side" in v["settle"] and "base's requests" in v["settle"]
