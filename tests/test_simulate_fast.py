"""The fast simulator path: totals at 1M rounds against closed forms, through the full report."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from analyzer.cli import main
from analyzer.simulate.fast import BATCH_CYCLE, GAMMA, ROUNDS_PER_REQUEST, base_ms, spec_ms, step_batches


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
    # Both deployments run the same batch-size cycle over their 500,000 rounds, so per bucket
    # t0 = base_ms(B) and a speculative round costs spec_ms(B); speedup is Σ t0·committed / Σ time.
    batches = step_batches(500_000)
    base_t = {b: base_ms(b) for b in BATCH_CYCLE}
    rounds_by_batch = {b: batches[batches == b].sum() for b in BATCH_CYCLE}
    last = batches[-1]                          # the last step may be short: its own batch size
    if last not in rounds_by_batch:
        rounds_by_batch[last] = last
        base_t[last] = base_ms(last)
    tokens_per_round = (1 - 0.8 ** 5) / (1 - 0.8)
    baseline_time = sum(base_t[b] * n * tokens_per_round for b, n in rounds_by_batch.items())
    spec_time = sum(spec_ms(np.array(b)) * n for b, n in rounds_by_batch.items())
    spec = big["deployments"][1]
    # durations are rounded to µs in the files, so allow that much
    assert spec["speedup"] == pytest.approx(baseline_time / spec_time, rel=1e-5)
    assert spec["speedup_coverage"] == 1.0
