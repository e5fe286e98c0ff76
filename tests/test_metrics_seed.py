"""The seed's section 8.1 worked example, and the ledger identities, from real traces.

Setup (seed 8.1): conditional acceptance a = 0.8 at every position, batch size 1,
plain decoding T0 = 10 ms per token, and a round that costs
cheap(γ) = 10 + 0.7γ + 0.1γ² ms or costly(γ) = 10 + 5γ + 0.8γ² ms.

The traces hold K counts that follow the truncated geometric law exactly: with
N = 5^γ rounds, K = k < γ occurs 4^k · 5^(γ-k-1) times and K = γ occurs 4^γ times.
Then E[L] = (1 - a^(γ+1)) / (1 - a) and speedup = T0 · E[L] / cost(γ), so the
expected numbers are the seed's table, not whatever the code prints.
"""

import pytest

from analyzer import api
from tracebuilder import at, write_columns, write_table


def cheap(gamma):
    return 10 + 0.7 * gamma + 0.1 * gamma ** 2


def costly(gamma):
    return 10 + 5.0 * gamma + 0.8 * gamma ** 2


def k_counts(gamma):
    counts = {k: 4 ** k * 5 ** (gamma - k - 1) for k in range(gamma)}
    counts[gamma] = 4 ** gamma
    return counts


def write_seed_traces(root, gamma, cost, baseline_rounds=1000):
    """One eagle deployment at fixed γ and its `none` baseline, every round alone in its step."""
    write_table(root, "deployments", [
        {"deployment_id": "spec", "model": "m", "method": "eagle", "num_speculative_tokens": gamma},
        {"deployment_id": "base", "model": "m", "method": "none", "num_speculative_tokens": 0},
    ])
    accepted = [k for k, n in k_counts(gamma).items() for _ in range(n)]
    n = len(accepted)
    write_columns(root, "rounds", {
        "deployment_id": ["spec"] * n + ["base"] * baseline_rounds,
        # the baseline's rounds take turns among 10 requests: its t0 rests on enough of them
        # (the [evidence] floors: 20 steps and 10 requests)
        "request_id": ["r"] * n + [f"b{i % 10}" for i in range(baseline_rounds)],
        "round_idx": list(range(n)) + list(range(baseline_rounds)),
        "step_id": list(range(n)) + list(range(baseline_rounds)),
        "num_draft_tokens": [gamma] * n + [0] * baseline_rounds,
        "num_accepted_tokens": accepted + [0] * baseline_rounds,
        "num_committed_tokens": [k + 1 for k in accepted] + [1] * baseline_rounds,
        "stop_reason": [None] * (n + baseline_rounds),
    })
    write_columns(root, "steps", {
        "deployment_id": ["spec"] * n + ["base"] * baseline_rounds,
        "step_id": list(range(n)) + list(range(baseline_rounds)),
        "start_time": [at(0)] * (n + baseline_rounds),
        "duration_ms": [cost(gamma)] * n + [10.0] * baseline_rounds,
        "batch_size": [1] * (n + baseline_rounds),
    })
    return root


def speedup_of(root):
    ws = api.open_traces(root)
    try:
        return ws.con.execute("select speedup, speedup_coverage from speedup where deployment_id = 'spec'").fetchone()
    finally:
        ws.close()


@pytest.mark.parametrize("gamma, expected", [(1, 1.667), (2, 2.068), (4, 2.334), (8, 1.968)])
def test_seed_cheap_drafts(tmp_path, gamma, expected):
    speedup, coverage = speedup_of(write_seed_traces(tmp_path, gamma, cheap))
    assert round(speedup, 3) == expected
    assert coverage == 1.0


def test_seed_costly_drafts_lose_at_gamma_4(tmp_path):
    speedup, _ = speedup_of(write_seed_traces(tmp_path, 4, costly))
    assert round(speedup, 3) == 0.785


def test_closed_form_accept_length_and_tail_sum_identity(tmp_path):
    gamma = 4
    ws = api.open_traces(write_seed_traces(tmp_path, gamma, cheap))
    mean_len, per_req, rate, tokens = ws.con.execute(
        "select mean_accept_length, mean_accept_length_per_request, acceptance_rate, tokens_per_round "
        "from accept_length where deployment_id = 'spec'").fetchone()
    closed_form = (1 - 0.8 ** (gamma + 1)) / (1 - 0.8)  # 3.3616
    assert mean_len == pytest.approx(closed_form, rel=1e-12)
    assert per_req == pytest.approx(closed_form, rel=1e-12)  # one request
    assert tokens == pytest.approx(closed_form, rel=1e-12)   # no truncation, every round drafts
    assert rate == pytest.approx((closed_form - 1) / gamma, rel=1e-12)
    positions = ws.con.execute(
        "select position, survival, conditional, marginal_gain, vllm_rate from position_acceptance "
        "where deployment_id = 'spec' order by position").fetchall()
    assert [p[0] for p in positions] == [1, 2, 3, 4]
    for position, survival, conditional, gain, vllm_rate in positions:
        assert conditional == pytest.approx(0.8, rel=1e-12)
        assert survival == pytest.approx(0.8 ** position, rel=1e-12)
        assert gain == pytest.approx(survival, rel=1e-12)  # fixed γ: marginal gain = survival
        assert vllm_rate == pytest.approx(survival, rel=1e-12)
    # tail-sum identity: E[L] = 1 + Σ Pr(K ≥ i)
    assert 1 + sum(p[1] for p in positions) == pytest.approx(mean_len, rel=1e-12)
    ws.close()


def test_per_bucket_condition_and_ledger(tmp_path):
    ws = api.open_traces(write_seed_traces(tmp_path, 4, costly))
    row = ws.con.execute(
        "select l.batch_bucket, l.round_ms, l.t0_ms, l.tokens_per_round, s.speedup, l.condition_holds, "
        "l.break_even_ms from speedup_by_batch as s join round_ledger as l using (deployment_id, batch_bucket) "
        "where deployment_id = 'spec'").fetchone()
    bucket, round_ms, t0, tokens, speedup, holds, break_even = row
    assert bucket == "1"
    assert round_ms == pytest.approx(42.8)
    assert t0 == pytest.approx(10.0)
    assert break_even == pytest.approx(10.0 * 3.3616)
    assert holds is False  # 42.8 ms per round > 33.6 ms that plain decoding needs
    assert speedup == pytest.approx(10.0 * 3.3616 / 42.8)
    ws.close()


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=10, deadline=None)
@given(gamma=st.integers(1, 6), data=st.data())
def test_tail_sum_identity_for_any_fixed_gamma_histogram(tmp_path_factory, gamma, data):
    """1 + Σ survival_i = mean_accept_length whenever every round drafts the same γ."""
    counts = data.draw(st.lists(st.integers(0, 30), min_size=gamma + 1, max_size=gamma + 1).filter(any))
    accepted = [k for k, n in enumerate(counts) for _ in range(n)]
    root = tmp_path_factory.mktemp("tail")
    write_table(root, "deployments", [{"deployment_id": "d", "model": "m", "method": "eagle",
                                       "num_speculative_tokens": gamma}])
    write_columns(root, "rounds", {
        "deployment_id": ["d"] * len(accepted), "request_id": ["r"] * len(accepted),
        "round_idx": list(range(len(accepted))), "num_draft_tokens": [gamma] * len(accepted),
        "num_accepted_tokens": accepted, "num_committed_tokens": [k + 1 for k in accepted],
        "stop_reason": [None] * len(accepted)})
    ws = api.open_traces(root)
    mean_len = ws.con.execute("select mean_accept_length from accept_length").fetchone()[0]
    survival = [s for (s,) in ws.con.execute("select survival from position_acceptance order by position").fetchall()]
    ws.close()
    assert mean_len == pytest.approx(1 + sum(accepted) / len(accepted), rel=1e-12)
    assert 1 + sum(survival) == pytest.approx(mean_len, rel=1e-12)
