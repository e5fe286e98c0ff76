"""The fast simulator path: totals at 1M rounds against closed forms, through the full report."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from analyzer.cli import main
from analyzer.simulate.fast import BATCH_CYCLE, GAMMA, K_PATTERN, ROUNDS_PER_REQUEST, base_ms, spec_ms, step_batches


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    out = tmp_path_factory.mktemp("fast")
    result = CliRunner().invoke(main, ["simulate", str(out), "--rounds", "1000000", "--no-tokens"])
    assert result.exit_code == 0, result.output
    report = CliRunner().invoke(main, ["report", str(out), "--format", "json"])
    assert report.exit_code == 0, report.output
    return json.loads(report.stdout)


def test_fast_path_needs_both_flags(tmp_path):
    result = CliRunner().invoke(main, ["simulate", str(tmp_path), "--rounds", "1000"])
    assert result.exit_code == 2 and "--no-tokens" in result.stderr


def test_totals_match_closed_forms(big):
    base, spec = big["deployments"]            # ordered: plain decoding first
    assert (base["deployment_id"], spec["deployment_id"]) == ("fast-base", "fast-eagle")
    per_dep = 500_000                          # 1M rounds, half each, in whole requests of 100 rounds
    assert big["input"]["rounds"] == 2 * per_dep and big["input"]["requests"] == 2 * per_dep // ROUNDS_PER_REQUEST
    assert base["num_committed_tokens"] == per_dep and base["speedup"] is None
    # K repeats a 625-round pattern with counts 125, 100, 80, 64, 256 of K = 0..4: 500,000 = 800 periods.
    periods = per_dep // 625
    accepted = periods * (0 * 125 + 1 * 100 + 2 * 80 + 3 * 64 + 4 * 256)
    assert spec["num_spec_rounds"] == per_dep
    assert spec["num_draft_tokens"] == GAMMA * per_dep
    assert spec["num_accepted_tokens"] == accepted
    assert spec["num_committed_tokens"] == accepted + per_dep
    closed_form = (1 - 0.8 ** 5) / (1 - 0.8)   # 3.3616, E[L] of the truncated geometric law
    assert spec["mean_accept_length"] == pytest.approx(closed_form, rel=1e-12)
    survival = [p["survival"] for p in spec["positions"]]
    assert survival == pytest.approx([0.8, 0.64, 0.512, 0.4096], rel=1e-12)


def test_speedup_matches_the_cost_model(big):
    # Both deployments run the same batch-size cycle over their 500,000 rounds, so each
    # speculative step at batch B is matched with the baseline's time per token at B itself,
    # t0(B) = base_ms(B) (its load cell's point is B: one batch size per cell), and its
    # counterfactual is committed · base_ms(B) against rounds · spec_ms(B). base_ms has no
    # context term, so the baseline's slope on context is 0 and t0 does not move with it.
    # A step is matched only at contexts the baseline's steps held at that batch size, widened
    # by context_margin (25 %): a round's context_len is 512 + round_idx · (γ + 1), so the
    # baseline's steps hold 512..611 tokens a request and the speculative ones 512..1007;
    # matched when X / B lies within [least / 1.25, most · 1.25] of the baseline's steps at B.
    # The short last step (batch 8, once on each side) is no point of the baseline (1 < 20
    # decode steps), and 12 > 6 · 1.25 + 1: batch 8 lies in a load gap.
    # speedup = Σ committed · base_ms(B) / Σ B · spec_ms(B) over the matched steps;
    # coverage = their committed tokens / all committed tokens.
    batches = step_batches(500_000)
    starts = np.concatenate([[0], np.cumsum(batches)[:-1]])
    idx = np.arange(500_000)
    round_idx = idx % ROUNDS_PER_REQUEST
    base_context = np.add.reduceat(512 + round_idx, starts) / batches               # per request
    spec_context = np.add.reduceat(512 + round_idx * (GAMMA + 1), starts) / batches
    committed = np.add.reduceat(K_PATTERN[idx % len(K_PATTERN)] + 1, starts)
    matched = np.zeros(len(batches), bool)
    for b in BATCH_CYCLE:                       # every batch size of the cycle: over 2,600 steps each
        at = batches == b
        low, high = base_context[at].min() / 1.25, base_context[at].max() * 1.25
        matched |= at & (spec_context >= low) & (spec_context <= high)
    counterfactual = (committed * base_ms(batches))[matched].sum()
    spec_time = (batches * spec_ms(batches))[matched].sum()
    spec = big["deployments"][1]
    # durations are rounded to µs in the files (base_ms and spec_ms are whole µs), so allow that much
    assert spec["speedup"] == pytest.approx(counterfactual / spec_time, rel=1e-9)
    assert spec["speedup_coverage"] == pytest.approx(committed[matched].sum() / committed.sum(), rel=1e-12)
    # the load curve: t0 is base_ms at the bucket's one matched batch size (5-8: batch 6, not 8);
    # at batch 96 every speculative step holds 749.5-769.5 tokens a request, past 563.5 · 1.25 = 704.4
    curve = {r["batch_bucket"]: r["t0_ms"] for r in big["load_curve"] if r["deployment_id"] == "fast-eagle"}
    assert curve == {"1": pytest.approx(6.05), "2": pytest.approx(6.1), "3-4": pytest.approx(6.15),
                     "5-8": pytest.approx(6.3), "9-16": pytest.approx(6.6), "17-32": pytest.approx(7.2),
                     "33-64": pytest.approx(8.4), "65-128": None}
    reasons = {(u["batch_bucket"], u["reason"]) for u in spec["uncovered_buckets"]}
    assert reasons == {(bucket, "context_out_of_range") for bucket in curve} | {("5-8", "load_gap")}
