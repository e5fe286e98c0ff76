"""analyzer.tuning.recommend and `specan recommend` (docs/commands.md, section `specan recommend`).

The traces are the seed's section 8.1 setup, built in test_tuning (see its
docstring): conditional acceptance exactly 0.8 at every position, pooled over all
rounds; γ varies per step from 1 to 8 at batch size 1; plain decoding costs 10 ms
per token. Expected speedups are t0 · E[L](γ) / cost(γ) worked out by hand:

    γ         1      2      3      4      5      8
    E[L]      1.8    2.44   2.952  3.3616 3.6893 4.3289
    cheap     10.8   11.8   13.0   14.4   16.0   22.0    -> 1.667 2.068 2.271 2.334 2.306 1.968
    costly    15.8   23.2   32.2   42.8   55.0   101.2   -> 1.139 1.052 0.917 0.785 0.671 0.428

The tuning search predicts; the config is decided from the evidence (decide/configs.py,
issue 36): a batch bucket gets k > 0 only where the deployment's own measured speedup there
lies above 1 by its 95 % interval (then k = the predicted best), 0 where it lies below 1 or
where the baseline never ran; an undecided bucket is 0 at the edges and keeps the lower k
between two paying buckets; a bucket never run at takes the nearest lower bucket's k below a
paying bucket (the lowest's below the lowest) and 0 above every paying bucket.

The measured speedup of a bucket is Σ t0 · committed / Σ time over its steps. One block of the
pooled law (60 rounds: 15, 10, 10 rounds at γ = 1, 2, 3 and 5 at each γ from 4 to 8, 17 of them
accepting every draft) commits Σ committed = 215 + 17 = 232 tokens; its rounds take
Σ cheap = 15·10.8 + 10·11.8 + 10·13.0 + 5·(14.4 + 16.0 + 17.8 + 19.8 + 22.0) = 860 ms and
Σ costly = 15·15.8 + 10·23.2 + 10·32.2 + 5·(42.8 + 55.0 + 68.8 + 84.2 + 101.2) = 2551 ms.

An interval needs blocks of time that differ: each baseline's step times rise by 0.01 ms a
step about their mean (tracebuilder.trend_ms), so its t0 is the mean exactly, and where a
deployment ran two regimes their steps take turns in time (tracebuilder.interleave), as a
served load's batch sizes do. The intervals are asserted only to lie above or below 1.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.analysis.config import parse_config
from analyzer.analysis.tuning import UnknownDeployment
from analyzer.cli import main
from analyzer.render.recommend import render_recommend_markdown
from test_tuning import Traces, cheap, closed_form_length, costly, fixed_gamma_block, pooled_block
from tracebuilder import interleave, trend_ms

# the pooled block of the module docstring: committed tokens, and its round time at each cost
BLOCK_TOKENS, BLOCK_CHEAP_MS, BLOCK_COSTLY_MS = 232, 860.0, 2551.0


def recommend_for(root, deployment_id="spec", config=None):
    """``specan recommend``'s document: the search's predictions and the config decided from
    the evidence (api.recommend)."""
    ws = api.open_traces(root)
    try:
        return api.recommend(ws, deployment_id, config=config)
    finally:
        ws.close()


def only_bucket(doc, bucket="1"):
    (b,) = [b for b in doc["buckets"] if b["batch_bucket"] == bucket]
    return b


def by_gamma(rounds, batch, cost):
    """The steps Traces.regime writes, as (rounds, ms, request prefix): ``batch`` rounds that
    all drafted one γ per step, γ by γ, each costing cost(γ)."""
    grouped: dict[int, list] = {}
    for r in rounds:
        grouped.setdefault(r[0], []).append(r)
    steps = []
    for gamma, members in sorted(grouped.items()):
        assert len(members) % batch == 0, (gamma, len(members), batch)
        steps += [(members[i:i + batch], cost(gamma), "s") for i in range(0, len(members), batch)]
    return steps


def plain(batch, step_ms, steps=20):
    """A baseline's steps of ``batch`` plain rounds taking trend_ms(step_ms, steps): t0 = step_ms
    exactly, on 20 steps over 10 sets of requests (the [evidence] floors)."""
    return [([(0, 0)] * batch, ms, f"b{i % 10}-") for i, ms in enumerate(trend_ms(step_ms, steps))]


def take_turns(t, deployment_id, *regimes):
    """Write the steps of ``regimes`` for ``deployment_id``, taking turns in time."""
    for rounds, ms, prefix in interleave(*regimes):
        t.step(deployment_id, rounds, ms, request_prefix=prefix)
    return t


def sweep(root, cost, *, high=None, method="eagle", gamma=8):
    """``spec`` sweeps γ = 1..8 per step at batch size 1 with round cost ``cost``; ``base``
    decodes at 10 ms per token. ``high`` = (batch, cost, t0) adds a second regime, 20 blocks
    at that batch size, taking turns with the first."""
    t = Traces().deployment("spec", method=method, gamma=gamma).deployment("base", "none")
    spec, base = [by_gamma(pooled_block(), 1, cost)], [plain(1, 10.0)]
    if high:
        batch, high_cost, t0 = high
        spec.append(by_gamma(pooled_block() * 20, batch, high_cost))
        base.append(plain(batch, t0))
    return take_turns(take_turns(t, "spec", *spec), "base", *base).write(root)


@pytest.fixture(scope="module")
def two_regimes(tmp_path_factory):
    """cheap at batch size 1; at batch size 100 every γ > 0 loses: T = 20 + 20γ against
    t0 = 20, so speedup(γ) = E[L](γ) / (1 + γ) < 1."""
    return sweep(tmp_path_factory.mktemp("two"), cheap, high=(100, lambda g: 20 + 20 * g, 20.0))


def test_cheap_drafts_recommend_gamma_4(tmp_path):
    doc = recommend_for(sweep(tmp_path, cheap))
    b = only_bucket(doc)
    speedup = b["predicted_speedup"]
    assert list(speedup) == [str(g) for g in range(9)]
    assert speedup["0"] == 1.0
    assert {g: round(speedup[str(g)], 3) for g in (1, 2, 4, 8)} == {1: 1.667, 2: 2.068, 4: 2.334, 8: 1.968}
    for g in range(1, 9):
        assert speedup[str(g)] == pytest.approx(10 * closed_form_length(g) / cheap(g), rel=1e-12)
        assert b["round_ms_source"][str(g)] == "measured"
    assert b["predicted_best"] == 4
    assert b["observed_gamma"] == list(range(1, 9))
    assert b["baseline_ms_per_token"] == pytest.approx(10.0)
    # every γ was measured, so the fit serves none and its R² is not shown with the prediction
    assert b["fit_used"] is False and b["fit_r2"] is None
    assert doc["cost_fits"][0]["r2"] == pytest.approx(1.0, abs=1e-12)
    assert b["speedup_at_k"] == pytest.approx(10 * closed_form_length(4) / cheap(4), rel=1e-12)
    assert b["speedup_at_k_source"] == "predicted"
    assert b["why"] == "largest predicted speedup (γ = 0–8)"
    # the sweep as it ran: 10 · 232 / 860 = 2.698, above 1 by its interval, on all of its
    # tokens: the bucket pays, and gets the predicted best
    assert b["measured_speedup"] == pytest.approx(10 * BLOCK_TOKENS / BLOCK_CHEAP_MS)
    lo, hi = b["measured_speedup_interval"]
    assert 1 < lo < b["measured_speedup"] < hi
    assert (b["token_share"], b["matched_share"]) == (pytest.approx(1.0), pytest.approx(1.0))
    assert (b["evidence"], b["recommended"]) == ("pays", 4)
    assert b["why_k"].startswith("measured 2.7× [") and b["why_k"].endswith("above 1 by its interval")
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 1, 4]]
    assert doc["config_speedup"] is None   # the config turns speculation off nowhere
    assert doc["baseline_id"] == "base"
    assert not any("Dynamic SD" in n for n in doc["notes"])  # eagle is a tested method


def test_costly_drafts_predict_gamma_1_but_the_sweep_as_it_ran_loses(tmp_path):
    """The old rule took the predicted best, γ = 1 (1.139). The new one decides on the
    deployment's own measured speedup: the sweep over γ = 1..8 it ran measured
    10 · 232 / 2551 = 0.909, below 1 by its interval, so speculation is off there."""
    doc = recommend_for(sweep(tmp_path, costly))
    b = only_bucket(doc)
    assert round(b["predicted_speedup"]["1"], 3) == 1.139
    assert round(b["predicted_speedup"]["2"], 3) == 1.052
    assert round(b["predicted_speedup"]["3"], 3) == 0.917
    assert round(b["predicted_speedup"]["4"], 3) == 0.785
    assert b["predicted_best"] == 1
    assert b["measured_speedup"] == pytest.approx(10 * BLOCK_TOKENS / BLOCK_COSTLY_MS)
    assert b["measured_speedup_interval"][1] < 1
    assert (b["evidence"], b["recommended"]) == ("loses", 0)
    assert b["why_k"].startswith("measured 0.909× [") and b["why_k"].endswith("below 1 by its interval")
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 1, 0]]
    # speculation off everywhere: the config is plain decoding, 1× on the same steps
    assert doc["config_speedup"]["speedup"] == pytest.approx(1.0) and doc["config_speedup"]["off"] == [[1, 1]]


def test_high_batch_regime_loses_and_the_buckets_never_run_above_the_paying_one_are_off(two_regimes):
    """Buckets 2 … 33-64 never ran. The old rule gave them the k of the nearest lower bucket
    (4); now a bucket never run at above every bucket that pays is unmeasured: k = 0."""
    doc = recommend_for(two_regimes)
    low, high = only_bucket(doc, "1"), only_bucket(doc, "65-128")
    assert (low["predicted_best"], high["predicted_best"]) == (4, 0)
    assert high["baseline_ms_per_token"] == pytest.approx(20.0)
    for g in range(1, 9):
        assert high["predicted_speedup"][str(g)] == pytest.approx(closed_form_length(g) / (1 + g), rel=1e-12)
        assert high["predicted_speedup"][str(g)] < 1
    # measured at 100: 20 blocks of 232 tokens at t0 = 20 against 20 · Σ (20 + 20γ) over a block
    # = 20 · (20 · 60 + 20 · 215) = 110,000 ms: 92,800 / 110,000 = 0.844, below 1 by its interval
    assert high["measured_speedup"] == pytest.approx(20 * 20 * BLOCK_TOKENS / 110_000)
    assert high["measured_speedup_interval"][1] < 1 < low["measured_speedup_interval"][0]
    # bucket 1 holds 232 of 232 + 4,640 tokens: 4.8 %, above min_bucket_share (2 %)
    assert low["token_share"] == pytest.approx(232 / 4872)
    assert [(b["evidence"], b["recommended"]) for b in (low, high)] == [("pays", 4), ("loses", 0)]
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 1, 4], [2, 128, 0]]
    assert not any("nearest lower bucket" in n for n in doc["notes"])
    # that config on the same steps: bucket 1 as it ran (2,320 ms of plain decoding in 860 ms),
    # 65-128 as plain decoding (92,800 ms in 92,800): 95,120 / 93,660
    assert doc["config_speedup"]["speedup"] == pytest.approx(95_120 / 93_660)
    assert doc["config_speedup"]["off"] == [[2, 128]]


def test_a_bucket_without_a_baseline_is_off_and_the_buckets_above_it_take_its_k(tmp_path):
    """The baseline ran only at batch size 100: bucket 1 has no t0, so no prediction. The old
    rule gave it the k of the lowest predicted bucket; now it has no baseline, so k = 0 until
    it is measured, and buckets 2 … 33-64 (never run, below a bucket that pays) take the k of
    the nearest lower bucket, 1's 0. At 100 every round costs twice cheap against t0 = 20:
    the cheap predictions again, and measured 20 · 20 · 232 / (2 · 20 · 860) = 2.698."""
    t = Traces().deployment("spec").deployment("base", "none")
    take_turns(t, "spec", by_gamma(pooled_block(), 1, cheap),
               by_gamma(pooled_block() * 20, 100, lambda g: 2 * cheap(g)))
    take_turns(t, "base", plain(100, 20.0))
    doc = recommend_for(t.write(tmp_path))
    low, high = only_bucket(doc, "1"), only_bucket(doc, "65-128")
    assert low["predicted_best"] is None and low["baseline_ms_per_token"] is None
    assert set(low["predicted_speedup"].values()) == {1.0, None}
    assert (low["evidence"], low["recommended"], low["matched_share"]) == ("no_baseline", 0, 0.0)
    assert low["why_k"] == "no baseline at these loads: speculation off here until measured"
    assert high["predicted_speedup"]["4"] == pytest.approx(10 * closed_form_length(4) / cheap(4), rel=1e-12)
    assert high["predicted_best"] == 4
    assert high["measured_speedup"] == pytest.approx(20 * BLOCK_TOKENS / (2 * BLOCK_CHEAP_MS))
    assert high["measured_speedup_interval"][0] > 1
    assert (high["evidence"], high["recommended"]) == ("pays", 4)
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 64, 0], [65, 128, 4]]


def test_never_run_and_undecided_buckets_between_two_paying_ones_keep_the_lower_k(tmp_path):
    """γ = 4 only, 5^4 rounds of the exact truncated geometric law at each of batch sizes 1, 5
    and 25 (2,101 tokens each: E[L] = 3.3616), taking turns. Measured: batch 1, 14.4 ms rounds
    against t0 = 10: 10 · 3.3616 / 14.4 = 2.334; batch 25, 40 ms against 20: 1.681; batch 5,
    33.616 ms against 10: exactly 1, so its interval holds 1 whatever the noise: undecided.
    Between two paying buckets it keeps the lower one's k (a hole needs its own evidence),
    and the never-run buckets 2, 3-4 and 9-16 take the nearest lower bucket's: one range."""
    t = Traces().deployment("spec", gamma=4).deployment("base", "none")
    take_turns(t, "spec", by_gamma(fixed_gamma_block(4), 1, lambda g: 14.4),
               by_gamma(fixed_gamma_block(4), 5, lambda g: 33.616), by_gamma(fixed_gamma_block(4), 25, lambda g: 40.0))
    take_turns(t, "base", plain(1, 10.0), plain(5, 10.0), plain(25, 20.0))
    doc = recommend_for(t.write(tmp_path))
    one, five, twenty_five = (only_bucket(doc, b) for b in ("1", "5-8", "17-32"))
    assert one["measured_speedup"] == pytest.approx(10 * 3.3616 / 14.4)
    assert five["measured_speedup"] == pytest.approx(1.0)
    assert twenty_five["measured_speedup"] == pytest.approx(20 * 3.3616 / 40)
    assert [b["evidence"] for b in (one, five, twenty_five)] == ["pays", "undecided", "pays"]
    # the search alone turns 5-8 off (measured 1 ≤ 1): the evidence keeps γ = 4 there
    assert five["predicted_best"] == 0 and five["recommended"] == 4
    assert five["why_k"].endswith("the interval includes 1; between two buckets that pay, so it keeps the lower "
                                  "one's k")
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 32, 4]]
    assert doc["config_speedup"] is None


def test_a_hole_between_two_paying_buckets_needs_its_own_evidence(tmp_path):
    """As above, but batch 5's rounds take 50 ms: 10 · 3.3616 / 50 = 0.672, below 1 by its
    interval. Now 5-8 is off, and so are 9-16 (never run: the nearest lower bucket's k)."""
    t = Traces().deployment("spec", gamma=4).deployment("base", "none")
    take_turns(t, "spec", by_gamma(fixed_gamma_block(4), 1, lambda g: 14.4),
               by_gamma(fixed_gamma_block(4), 5, lambda g: 50.0), by_gamma(fixed_gamma_block(4), 25, lambda g: 40.0))
    take_turns(t, "base", plain(1, 10.0), plain(5, 10.0), plain(25, 20.0))
    doc = recommend_for(t.write(tmp_path))
    five = only_bucket(doc, "5-8")
    assert five["measured_speedup"] == pytest.approx(10 * 3.3616 / 50)
    assert five["measured_speedup_interval"][1] < 1
    assert (five["evidence"], five["recommended"]) == ("loses", 0)
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 4, 4], [5, 16, 0], [17, 32, 4]]


def test_gamma_never_varied_keeps_it_where_it_pays_and_turns_it_off_elsewhere(tmp_path):
    """γ = 4 everywhere, 5^4 rounds at the exact truncated geometric law: measured speedup is
    10 · 3.3616 / 14.4 = 2.334 at batch size 1 and 20 · 3.3616 / 100 = 0.672 at 100."""
    t = Traces().deployment("spec", gamma=4).deployment("base", "none")
    take_turns(t, "spec", by_gamma(fixed_gamma_block(4), 1, cheap),
               by_gamma(fixed_gamma_block(4) * 4, 100, lambda g: 20 + 20 * g))
    take_turns(t, "base", plain(1, 10.0), plain(100, 20.0))
    doc = recommend_for(t.write(tmp_path))
    low, high = only_bucket(doc, "1"), only_bucket(doc, "65-128")
    assert low["measured_speedup"] == pytest.approx(10 * 3.3616 / 14.4)
    assert high["measured_speedup"] == pytest.approx(20 * 3.3616 / 100)
    assert (low["predicted_best"], high["predicted_best"]) == (4, 0)
    assert high["measured_speedup_interval"][1] < 1 < low["measured_speedup_interval"][0]
    assert [(b["evidence"], b["recommended"]) for b in (low, high)] == [("pays", 4), ("loses", 0)]
    assert low["gamma_varied"] is False and low["observed_gamma"] == [4]
    # no extrapolation: only the observed γ has a speedup, and it is the measured one
    assert low["predicted_speedup"] == {"0": 1.0, "1": None, "2": None, "3": None,
                                        "4": low["measured_speedup"]}
    assert low["speedup_source"] == {"0": "plain decoding", "1": None, "2": None, "3": None, "4": "measured"}
    assert (low["speedup_at_k"], low["speedup_at_k_source"]) == (low["measured_speedup"], "measured")
    assert (high["speedup_at_k"], high["speedup_at_k_source"]) == (1.0, "plain decoding")
    # the fit serves no γ: no R² beside the measurement
    assert low["fit_r2"] is None and high["fit_r2"] is None
    # one line per bucket, not one note listing every bucket
    assert low["why"] == ("only γ = 4 ran, so round cost can't be extrapolated: its measured speedup "
                          "2.334 > 1 keeps it")
    assert high["why"] == ("only γ = 4 ran, so round cost can't be extrapolated: its measured speedup "
                           "0.672 ≤ 1 turns it off")
    assert not any("never varied" in n for n in doc["notes"])
    # 2 … 33-64 never ran, above the only bucket that pays: off
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 1, 4], [2, 128, 0]]
    text = render_recommend_markdown(doc)
    # the measured speedup with its interval, then the evidence that decides, then the search's columns
    lo, hi = low["measured_speedup_interval"]
    assert f"| 1 | 4 | 10.000 | – | 2.3× [{lo:.2g}, {hi:.2g}] | pays | 1.000 | – | – | – | **2.334 (measured)** | 4 |" in text
    lo, hi = high["measured_speedup_interval"]
    assert (f"- 65-128: measured 0.672× [{lo:.3g}, {hi:.3g}]: below 1 by its interval (the search: only γ = 4 ran, "
            "so round cost can't be extrapolated: its measured speedup 0.672 ≤ 1 turns it off)") in text


def test_the_fit_and_its_held_slope_are_shown_where_they_serve_a_length(tmp_path):
    """γ = 1 (X = 2) takes 10.2 ms and γ = 3 (X = 4) 9.8 ms at batch size 1, every draft accepted.
    The unconstrained fit, T = 10.6 − 0.2 X, is held at β_tokens = 0: T = α = 10.0 ms, so
    T_round(2) = 10.0 from the fit. t0 = 10 ms and E[L](γ) = γ + 1:
        γ = 1: 10 · 2 / 10.2 = 1.961 (measured)   γ = 2: 10 · 3 / 10.0 = 3.0 (fit)
        γ = 3: 10 · 4 / 9.8 = 4.082 (measured)    -> k = 3, and R² = 0 (α alone) is shown.
    R² = 0 is below the default min_fit_r2 (0.5): the fit serves γ = 2 only with the floor at 0."""
    t = Traces().deployment("spec", gamma=3).deployment("base", "none")
    for gamma, ms in ((1, 10.2), (3, 9.8)):
        for _ in range(2):
            t.step("spec", [(gamma, gamma)], ms)
    t.baseline("base", 1, 10.0)
    root = t.write(tmp_path)
    b = only_bucket(recommend_for(root))
    assert b["round_ms_source"] == {"1": "measured", "2": None, "3": "measured"} and b["fit_used"] is False
    assert b["why"].endswith("the cost fit's R² 0.000 is below min_fit_r2 = 0.5, so it predicts no γ that never "
                             "ran: measured round times only (no prediction for γ = 2)")
    doc = recommend_for(root, config=parse_config({"evidence": {"min_fit_r2": 0.0}}))
    b = only_bucket(doc)
    assert b["round_ms_source"] == {"1": "measured", "2": "fit", "3": "measured"}
    assert b["predicted_speedup"] == {"0": 1.0, "1": pytest.approx(20 / 10.2), "2": pytest.approx(3.0),
                                      "3": pytest.approx(40 / 9.8)}
    assert b["predicted_best"] == 3 and b["fit_used"] is True and b["fit_r2"] == pytest.approx(0.0, abs=1e-12)
    assert b["why"] == ("largest predicted speedup (γ = 0–3); γ = 2 from the round-cost fit; "
                        "β_tokens held at 0 (the unconstrained fit gave -0.2 ms/token)")
    text = render_recommend_markdown(doc)
    assert "| beta_tokens (unconstrained -0.20000) |" in text


def test_the_ranges_reach_the_largest_batch_size_the_deployment_ran(tmp_path):
    """Decode-only steps at batch size 1 only (the cheap sweep, k = 4, paying); one prefill step
    of 300 requests, which the fit leaves out: the ranges reach 300, with a note. The old rule
    extended bucket 1's k = 4 to 300; batch sizes 2 to 300 ran no decode step, so they are
    never-run buckets above every bucket that pays: speculation off there until measured."""
    t = Traces().deployment("spec").deployment("base", "none")
    take_turns(t, "spec", by_gamma(pooled_block(), 1, cheap))
    t.step("spec", [(0, 0)] * 300, 80.0, prefill=4096)
    doc = recommend_for(take_turns(t, "base", plain(1, 10.0)).write(tmp_path))
    assert [b["batch_bucket"] for b in doc["buckets"]] == ["1"]
    assert (only_bucket(doc)["evidence"], only_bucket(doc)["recommended"]) == ("pays", 4)
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 1, 4], [2, 300, 0]]
    assert ("The deployment ran at batch sizes up to 300, beyond its last bucket with decode-only steps "
            "(1, to 1): no decode step measured speculation there, so it is off from 2 to 300 until one "
            "does.") in doc["notes"]
    # no decode step ran at 2-300: the config's speedup on the same steps is the speedup as it ran
    assert doc["config_speedup"]["speedup"] == pytest.approx(10 * BLOCK_TOKENS / BLOCK_CHEAP_MS)


def test_no_k_exceeds_num_speculative_tokens(tmp_path):
    """The cheap sweep drafts up to 8, but the deployment allows 3: k is at most 3."""
    doc = recommend_for(sweep(tmp_path, cheap, gamma=3))
    b = only_bucket(doc)
    assert list(b["predicted_speedup"]) == ["0", "1", "2", "3"]
    # γ = 3 is the best length up to 3 (2.271), and the sweep as it ran pays (2.698)
    assert (b["predicted_best"], b["evidence"], b["recommended"]) == (3, "pays", 3)
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 1, 3]]


def test_513_plus_ends_at_the_largest_batch_size(tmp_path):
    """γ = 1 only, ten steps of 600 rounds (120 blocks of the truncated geometric law: 1.8
    tokens a round) taking trend_ms(30, 10, 0.1), 300 ms in all, against t0 = 25: measured
    25 · 1.8 · 6000 / (600 · 300) = 1.5. 513+ pays, and every bucket below it never ran: below
    the lowest paying bucket they take its k."""
    t = Traces().deployment("spec", gamma=1).deployment("base", "none")
    rounds = fixed_gamma_block(1) * 1200
    take_turns(t, "spec", [(rounds[i * 600:(i + 1) * 600], ms, "s") for i, ms in enumerate(trend_ms(30.0, 10, 0.1))])
    doc = recommend_for(take_turns(t, "base", plain(600, 25.0)).write(tmp_path))
    b = only_bucket(doc, "513+")
    assert b["measured_speedup"] == pytest.approx(25 * 1.8 * 6000 / (600 * 300))
    assert b["measured_speedup_interval"][0] > 1
    assert (b["evidence"], b["recommended"]) == ("pays", 1)
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 600, 1]]


def test_no_baseline_means_no_recommendation(tmp_path):
    t = Traces().deployment("spec")
    t.regime("spec", pooled_block(), 1, cheap)
    doc = recommend_for(t.write(tmp_path))
    assert doc["num_speculative_tokens_per_batch_size"] == []
    assert doc["baseline_id"] is None
    assert any(n.startswith("No matched baseline") and "no recommendation" in n for n in doc["notes"])
    b = only_bucket(doc)
    assert b["recommended"] is None and b["baseline_ms_per_token"] is None


def test_method_note_for_ngram(tmp_path):
    doc = recommend_for(sweep(tmp_path, cheap, method="ngram"))
    (note,) = [n for n in doc["notes"] if "Dynamic SD" in n]
    assert "EAGLE, EAGLE-3 and DFlash only" in note and "data parallelism" in note and "ngram" in note
    assert (only_bucket(doc)["predicted_best"], only_bucket(doc)["recommended"]) == (4, 4)  # nor the numbers


def test_unknown_deployment_names_it_and_the_known_ones(tmp_path):
    root = sweep(tmp_path, cheap)
    with pytest.raises(UnknownDeployment, match=r"unknown deployment 'nope'; known deployments: base, spec"):
        recommend_for(root, "nope")


def test_markdown_shows_every_gamma_and_the_config(two_regimes):
    text = render_recommend_markdown(recommend_for(two_regimes))
    assert '"num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 128, 0]]' in text
    header = next(line for line in text.splitlines() if line.startswith("| batch bucket | observed"))
    assert all(f"γ={g}" in header for g in range(9))
    row = next(line for line in text.splitlines() if line.startswith("| 1 |"))
    assert "**2.334**" in row and "1.968" in row


# --------------------------------------------------------------------------- CLI

def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_cli_json(two_regimes):
    result = run("recommend", two_regimes, "--deployment", "spec", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["deployment_id"] == "spec"
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 1, 4], [2, 128, 0]]
    assert {"batch_bucket", "observed_gamma", "predicted_speedup", "recommended", "baseline_ms_per_token",
            "fit_r2"} <= set(doc["buckets"][0])
    assert isinstance(doc["notes"], list)


def test_cli_markdown(two_regimes):
    result = run("recommend", two_regimes, "--deployment", "spec")
    assert result.exit_code == 0, result.output
    assert '"num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 128, 0]]' in result.output


def test_cli_unknown_deployment_exits_2(two_regimes):
    result = run("recommend", two_regimes, "--deployment", "nope")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "Error: unknown deployment 'nope'; known deployments: base, spec"]


def test_no_steps_table_means_no_recommendation(tmp_path):
    from tracebuilder import write_columns, write_table

    t = Traces().deployment("spec").deployment("base", "none")
    t.regime("spec", pooled_block(), 1, cheap).baseline("base", 1, 10.0)
    write_table(tmp_path, "deployments", t.deployments)
    write_columns(tmp_path, "rounds", {k: v for k, v in t.rounds.items() if k != "step_id"})
    doc = recommend_for(tmp_path)
    assert doc["num_speculative_tokens_per_batch_size"] == [] and doc["buckets"] == []
    assert doc["notes"] == ["No steps table: round costs are unknown, so there is no recommendation."]


def test_plain_decoding_deployment_gets_a_note(tmp_path):
    doc = recommend_for(sweep(tmp_path, cheap), "base")
    assert doc["num_speculative_tokens_per_batch_size"] == []
    assert doc["notes"] == ["base is plain decoding (method none): there is no speculation length to tune."]
