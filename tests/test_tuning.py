"""analyzer.tuning: E[L](γ), the round-cost fit, marginal returns, and the cost views.

The seed's section 8.1 setup (conditional acceptance a = 0.8 at every position,
batch size 1, plain decoding at T0 = 10 ms per token) with γ varying per step
from 1 to 8, and a round that costs cheap(γ) = 10 + 0.7γ + 0.1γ² ms or
costly(γ) = 10 + 5γ + 0.8γ² ms. Every expected number is worked out by hand
from those formulas, not copied from the code's output.

Acceptance counts (``pooled_block``): the conditional acceptance must be exactly
0.8 at every position when pooled over all rounds, with few rounds. With m_i
rounds rejected at position i (they drafted exactly i and accepted i − 1) and F_i
rounds that drafted i and accepted all of them, the rounds that reach position i
number P_i = 5·m_i and 4·m_i of them accept it, when F_i = 4·m_i − 5·m_{i+1}.
m_8 = 1 and m_i = ⌈5·m_{i+1} / 4⌉ keep every F_i ≥ 0: m = 12, 9, 7, 5, 4, 3, 2, 1,
60 rounds per block, and every γ from 1 to 8 has rounds. Blocks can be
concatenated (all counts add), so several regimes keep the pooled 0.8.
"""

from __future__ import annotations

import math

import pytest

from analyzer import api
from analyzer.analysis.tuning import expected_length, marginal_returns, round_cost_fits
from tracebuilder import at, write_columns, write_table

A = 0.8


def cheap(gamma):
    return 10 + 0.7 * gamma + 0.1 * gamma ** 2


def costly(gamma):
    return 10 + 5.0 * gamma + 0.8 * gamma ** 2


def closed_form_length(gamma, a=A):
    return (1 - a ** (gamma + 1)) / (1 - a)


def pooled_block(gmax=8):
    """(drafted, accepted) of rounds whose pooled conditional acceptance is exactly 0.8."""
    m = {gmax: 1, gmax + 1: 0}
    for i in range(gmax - 1, 0, -1):
        m[i] = -(-5 * m[i + 1] // 4)
    rounds = []
    for d in range(1, gmax + 1):
        full = 4 * m[d] - 5 * m[d + 1]
        assert full >= 0
        rounds += [(d, d - 1)] * m[d] + [(d, d)] * full
    return rounds


def fixed_gamma_block(gamma):
    """The truncated geometric law at fixed γ exactly: 5^γ rounds (as in test_metrics_seed)."""
    counts = {k: 4 ** k * 5 ** (gamma - k - 1) for k in range(gamma)}
    counts[gamma] = 4 ** gamma
    return [(gamma, k) for k, n in counts.items() for _ in range(n)]


class Traces:
    """Rounds and steps of several deployments, every step's rounds drafting one γ."""

    def __init__(self):
        self.deployments = []
        self.rounds = {k: [] for k in ("deployment_id", "request_id", "round_idx", "step_id", "num_draft_tokens",
                                       "num_accepted_tokens", "num_committed_tokens", "stop_reason",
                                       "num_invalidated_tokens", "num_verified_nodes")}
        self.steps = {k: [] for k in ("deployment_id", "step_id", "start_time", "duration_ms", "batch_size",
                                      "num_prefill_tokens")}
        self.next_step = {}
        self.clock_ms = {}

    def deployment(self, deployment_id, method="eagle", gamma=8, **extra):
        self.deployments.append({"deployment_id": deployment_id, "model": "m", "method": method,
                                 "num_speculative_tokens": 0 if method == "none" else gamma, **extra})
        return self

    def step(self, deployment_id, rounds, duration_ms, *, prefill=0, request_prefix="s"):
        """One step holding ``rounds``: (drafted, accepted[, invalidated[, nodes]]) per request;
        the request in slot i is ``request_prefix`` + i."""
        sid = self.next_step.get(deployment_id, 0)
        self.next_step[deployment_id] = sid + 1
        for slot, r in enumerate(rounds):
            d, k = r[0], r[1]
            self.rounds["deployment_id"].append(deployment_id)
            self.rounds["request_id"].append(f"{request_prefix}{slot}")
            self.rounds["round_idx"].append(sid)
            self.rounds["step_id"].append(sid)
            self.rounds["num_draft_tokens"].append(d)
            self.rounds["num_accepted_tokens"].append(k)
            self.rounds["num_committed_tokens"].append(k + 1)
            self.rounds["stop_reason"].append(None)
            self.rounds["num_invalidated_tokens"].append(r[2] if len(r) > 2 else 0)
            self.rounds["num_verified_nodes"].append(r[3] if len(r) > 3 else None)
        self.steps["deployment_id"].append(deployment_id)
        self.steps["step_id"].append(sid)
        # a deployment's steps run one after another, as an engine's do: a step starts when the
        # previous one ends (so no round's step ends before its request's previous one)
        start_ms = self.clock_ms.get(deployment_id, 0.0)
        self.clock_ms[deployment_id] = start_ms + float(duration_ms)
        self.steps["start_time"].append(at(start_ms))
        self.steps["duration_ms"].append(float(duration_ms))
        self.steps["batch_size"].append(len(rounds))
        self.steps["num_prefill_tokens"].append(prefill)
        return self

    def regime(self, deployment_id, rounds, batch, cost):
        """Steps of ``batch`` rounds that all drafted the same γ, each costing cost(γ)."""
        by_gamma = {}
        for r in rounds:
            by_gamma.setdefault(r[0], []).append(r)
        for gamma, members in sorted(by_gamma.items()):
            assert len(members) % batch == 0, (gamma, len(members), batch)
            for i in range(0, len(members), batch):
                self.step(deployment_id, members[i:i + batch], cost(gamma))
        return self

    def baseline(self, deployment_id, batch, step_ms, steps=20):
        """Plain decoding at ``step_ms`` per step of ``batch`` requests, so t0 = step_ms. The
        steps take turns among 10 sets of requests: a t0 resting on at least 20 steps and 10
        requests is usable ([evidence] floors; tests/test_evidence.py tests the floors)."""
        for i in range(steps):
            self.step(deployment_id, [(0, 0)] * batch, step_ms, request_prefix=f"b{i % 10}-")
        return self

    def write(self, root):
        write_table(root, "deployments", self.deployments)
        write_columns(root, "rounds", self.rounds)
        write_columns(root, "steps", self.steps)
        return root


def sweep(root, cost, *, copies=1, high=None):
    """``spec`` sweeps γ = 1..8 per step at batch size 1 with round cost ``cost``; ``base``
    decodes at 10 ms per token. ``high`` = (batch, cost, t0) adds a second regime."""
    t = Traces().deployment("spec").deployment("base", "none")
    t.regime("spec", pooled_block() * copies, 1, cost).baseline("base", 1, 10.0)
    if high:
        batch, high_cost, t0 = high
        t.regime("spec", pooled_block() * 20, batch, high_cost).baseline("base", batch, t0)
    return t.write(root)


@pytest.fixture(scope="module")
def cheap_ws(tmp_path_factory):
    ws = api.open_traces(sweep(tmp_path_factory.mktemp("cheap"), cheap))
    yield ws
    ws.close()


# --------------------------------------------------------------------------- E[L]

def test_expected_length_is_the_seeds():
    assert expected_length([0.0] * 4, 4) == 1
    assert expected_length([1.0] * 4, 4) == 5
    for gamma in (1, 2, 4, 8):
        assert expected_length([A] * 8, gamma) == pytest.approx(closed_form_length(gamma), rel=1e-12)
    assert expected_length([A] * 8, 4) == pytest.approx(3.3616)
    assert expected_length([0.5, 0.5], 0) == 1
    # a product that reached 0 adds nothing further, known or not
    assert expected_length([0.5, 0.0, None], 3) == 1.5
    # unknown from the first unknown position on
    assert expected_length([0.5, None], 1) == 1.5
    assert expected_length([0.5, None], 2) is None
    assert expected_length([0.5], 3) is None
    with pytest.raises(ValueError):
        expected_length([A], -1)


def test_pooled_block_has_exactly_point_eight_at_every_position(cheap_ws):
    block = pooled_block()
    assert len(block) == 60 and {d for d, _ in block} == set(range(1, 9))
    rows = cheap_ws.con.execute("select position, accepted, conditional from position_acceptance "
                                "where deployment_id = 'spec' order by position").fetchall()
    assert [r[0] for r in rows] == list(range(1, 9))
    assert [r[1] for r in rows] == [4 * m for m in (12, 9, 7, 5, 4, 3, 2, 1)]
    assert all(r[2] == 0.8 for r in rows)


# --------------------------------------------------------------------------- cost views

def test_cost_steps_counts_verified_tokens_and_the_proposed_gamma(tmp_path):
    t = Traces().deployment("spec", gamma=4).deployment("base", "none")
    # step 0: both proposed 4; the grammar cut 2 drafts of the first -> gamma 4, drafted_gamma null
    t.step("spec", [(2, 1, 2), (4, 0)], 9.0)
    # step 1: one request proposed 3, the other 4 -> mixed
    t.step("spec", [(3, 3), (4, 4)], 9.5)
    # step 2: a tree: 2 drafts deep, 6 nodes verified each
    t.step("spec", [(2, 2, 0, 6), (2, 1, 0, 6)], 11.0)
    # step 3: prefills, so it is not decode-only
    t.step("spec", [(4, 4)], 20.0, prefill=100)
    t.baseline("base", 2, 8.0)
    ws = api.open_traces(t.write(tmp_path))
    rows = ws.con.execute("select step_uid is not null, batch_size, batch_bucket, num_rounds, tokens_verified, "
                          "gamma, drafted_gamma, duration_ms from cost_steps order by duration_ms").fetchall()
    costs = ws.con.execute("select gamma, steps, round_ms, mean_tokens_verified from gamma_costs "
                           "order by gamma").fetchall()
    model = ws.con.execute("select n_steps, mixed_steps, gammas, distinct_tokens, mean_x, mean_y, sxx, sxy, syy "
                           "from cost_model").fetchall()
    ws.close()
    assert rows == [
        (True, 2, "2", 2, (2 + 1) + (4 + 1), 4, None, 9.0),
        (True, 2, "2", 2, (3 + 1) + (4 + 1), None, None, 9.5),
        (True, 2, "2", 2, (6 + 1) * 2, 2, 2, 11.0),
    ]  # the base deployment and the prefill step are left out
    assert costs == [(2, 1, 11.0, 14.0), (4, 1, 9.0, 8.0)]
    n, mixed, gammas, distinct, mean_x, mean_y, sxx, sxy, syy = model[0]
    assert (n, mixed, gammas, distinct) == (3, 1, [2, 4], 3)
    assert mean_x == pytest.approx(31 / 3) and mean_y == pytest.approx(29.5 / 3)
    xs, ys = [8, 9, 14], [9.0, 9.5, 11.0]
    assert sxx == pytest.approx(sum((x - mean_x) ** 2 for x in xs))
    assert sxy == pytest.approx(sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)))
    assert syy == pytest.approx(sum((y - mean_y) ** 2 for y in ys))


def test_rounds_that_proposed_nothing_are_no_speculation_length(tmp_path):
    """An n-gram lookup without a match proposes 0: its round is plain decoding, not γ = 0.
    Four steps of two requests (bucket 2):
      4 drafts and none (8.0 ms)  -> γ 4, partly drafting: in the fit, not in gamma_costs
      4 and 4 (9.0 ms)            -> γ 4: the only measured round time at 4
      none and none (7.0 ms)      -> a plain decode step, γ 0
      3 and 4 (8.5 ms)            -> mixed, γ null
    The bucket ran at γ = 4 only; its X (6, 10, 2, 9) varies at one batch size, so cost
    can be extrapolated in γ."""
    t = Traces().deployment("spec", method="ngram", gamma=4).deployment("base", "none")
    t.step("spec", [(4, 2), (0, 0)], 8.0)
    t.step("spec", [(4, 4), (4, 1)], 9.0)
    t.step("spec", [(0, 0), (0, 0)], 7.0)
    t.step("spec", [(3, 1), (4, 0)], 8.5)
    t.baseline("base", 2, 8.0)
    ws = api.open_traces(t.write(tmp_path))
    steps = ws.con.execute("select duration_ms, tokens_verified, gamma, partly_drafting from cost_steps "
                           "order by duration_ms").fetchall()
    costs = ws.con.execute("select gamma, steps, round_ms from gamma_costs order by gamma").fetchall()
    model = ws.con.execute("select gammas, mixed_steps, plain_steps, partial_steps from cost_model").fetchall()
    (fit,) = round_cost_fits(ws.con)
    ws.close()
    assert steps == [(7.0, 2, 0, False), (8.0, 6, 4, True), (8.5, 9, None, False), (9.0, 10, 4, False)]
    assert costs == [(0, 1, 7.0), (4, 1, 9.0)]
    assert model == [([4], 1, 1, 1)]
    assert fit["observed_gamma"] == [4] and fit["n_steps"] == 4
    assert (fit["mixed_steps"], fit["plain_steps"], fit["partial_steps"]) == (1, 1, 1)
    assert fit["gamma_varied"] is True and fit["singular"] is False


# --------------------------------------------------------------------------- the fit

def grid_traces(root, duration, *, gammas=(1, 2, 3), batches=(70, 90, 120)):
    """Steps at every (γ, batch size) in bucket 65-128, costing duration(X, B) with X = B·(γ+1)."""
    t = Traces().deployment("spec").deployment("base", "none")
    for gamma in gammas:
        for batch in batches:
            t.step("spec", [(gamma, 0)] * batch, duration(batch * (gamma + 1), batch))
    t.baseline("base", 100, 20.0)
    return t.write(root)


def fits_of(root):
    ws = api.open_traces(root)
    try:
        return round_cost_fits(ws.con)
    finally:
        ws.close()


def test_fit_recovers_an_exact_linear_model(tmp_path):
    (fit,) = fits_of(grid_traces(tmp_path, lambda x, b: 3.0 + 0.05 * x + 0.2 * b))
    assert fit["batch_bucket"] == "65-128" and fit["n_steps"] == 9
    assert fit["alpha"] == pytest.approx(3.0, abs=1e-9)
    assert fit["beta_tokens"] == pytest.approx(0.05, rel=1e-9)
    assert fit["beta_batch"] == pytest.approx(0.2, rel=1e-9)
    assert fit["q"] is None and fit["quadratic"] is False  # an exact linear fit keeps the linear model
    assert fit["r2"] == pytest.approx(1.0, abs=1e-12)
    assert fit["rmse"] == pytest.approx(0.0, abs=1e-6)
    assert fit["observed_gamma"] == [1, 2, 3] and fit["gamma_varied"] is True and fit["singular"] is False
    assert fit["mean_batch_size"] == pytest.approx((70 ** 2 + 90 ** 2 + 120 ** 2) / (70 + 90 + 120))
    assert all(abs(v) < 1e-9 for v in fit["residuals"].values())


def test_fit_recovers_the_quadratic_term(tmp_path):
    (fit,) = fits_of(grid_traces(tmp_path, lambda x, b: 3.0 + 0.05 * x + 0.2 * b + 1e-4 * x * x))
    assert fit["quadratic"] is True
    assert fit["q"] == pytest.approx(1e-4, rel=1e-6)
    assert fit["alpha"] == pytest.approx(3.0, rel=1e-6)
    assert fit["beta_tokens"] == pytest.approx(0.05, rel=1e-6)
    assert fit["beta_batch"] == pytest.approx(0.2, rel=1e-6)
    assert fit["r2"] == pytest.approx(1.0, abs=1e-12)


def test_fit_of_the_seed_sweep_at_batch_one(cheap_ws):
    """B is constant in bucket 1, so it drops out; cheap(γ) with X = γ + 1 is an exact quadratic:
    10 + 0.7(X − 1) + 0.1(X − 1)² = 9.4 + 0.5 X + 0.1 X²."""
    (fit,) = round_cost_fits(cheap_ws.con, "spec")
    assert fit["batch_bucket"] == "1" and fit["n_steps"] == 60
    assert fit["dropped"] == ["batch_size"] and fit["beta_batch"] is None
    assert fit["quadratic"] is True
    assert fit["alpha"] == pytest.approx(9.4, rel=1e-9)
    assert fit["beta_tokens"] == pytest.approx(0.5, rel=1e-9)
    assert fit["q"] == pytest.approx(0.1, rel=1e-9)
    assert fit["r2"] == pytest.approx(1.0, abs=1e-12)
    assert fit["observed_gamma"] == list(range(1, 9))


def test_linear_data_with_small_noise_does_not_take_the_quadratic(tmp_path):
    """BIC: a quadratic term that only chases noise is not kept."""
    wiggle = {140: 0.01, 210: -0.01, 280: 0.01, 180: -0.01, 270: 0.01, 360: -0.01, 240: 0.01, 480: -0.01}
    (fit,) = fits_of(grid_traces(tmp_path, lambda x, b: 3.0 + 0.05 * x + 0.2 * b + wiggle[x]))
    assert fit["quadratic"] is False
    assert fit["beta_tokens"] == pytest.approx(0.05, rel=0.05)
    assert 0.99 < fit["r2"] < 1


def test_fit_is_singular_when_gamma_never_varied(tmp_path):
    """γ = 4 at every batch size: X = 5B, so their effects can't be separated."""
    (fit,) = fits_of(grid_traces(tmp_path, lambda x, b: 3.0 + 0.05 * x + 0.2 * b, gammas=(4,)))
    assert fit["singular"] is True and "proportional" in fit["singular_reason"]
    assert fit["dropped"] == ["batch_size"] and fit["gamma_varied"] is False
    assert fit["r2"] == pytest.approx(1.0, abs=1e-12)  # T is linear in X alone: 3 + (0.05 + 0.2/5) X
    assert fit["beta_tokens"] == pytest.approx(0.09, rel=1e-9)


def test_fit_without_any_variation_in_tokens(tmp_path):
    t = Traces().deployment("spec", gamma=4).deployment("base", "none")
    for duration in (14.0, 14.5, 15.0):
        t.step("spec", [(4, 2)], duration)
    t.baseline("base", 1, 10.0)
    (fit,) = fits_of(t.write(tmp_path))
    assert fit["singular"] is True and "never varied" in fit["singular_reason"]
    assert fit["beta_tokens"] is None and fit["alpha"] == pytest.approx(14.5)
    assert fit["r2"] == pytest.approx(0.0, abs=1e-12) and fit["gamma_varied"] is False


# --------------------------------------------------------------------------- marginal returns

def test_marginal_returns_of_the_cheap_model(cheap_ws):
    """Position i pays while E(i)/T(i) > E(i−1)/T(i−1): for i ≤ 4 and not from 5 on.

    By hand, with E(i) = 5(1 − 0.8^(i+1)) and T(i) = cheap(i), T(0) = t0 = 10:
      i=4: ΔE/E(3) = 0.4096/2.952 = 0.1388 > ΔT/T(3) = 1.4/13.0 = 0.1077   pays
      i=5: ΔE/E(4) = 0.32768/3.3616 = 0.0975 < ΔT/T(4) = 1.6/14.4 = 0.1111 does not
    """
    (res,) = marginal_returns(cheap_ws.con, "spec")
    assert res["batch_bucket"] == "1" and res["baseline_ms_per_token"] == pytest.approx(10.0)
    pos = res["positions"]
    assert [p["position"] for p in pos] == list(range(1, 9))
    assert [p["pays"] for p in pos] == [True, True, True, True, False, False, False, False]
    assert res["largest_paying_gamma"] == 4
    for p in pos:
        i = p["position"]
        assert p["marginal_gain"] == pytest.approx(A ** i, rel=1e-12)
        assert p["expected_length"] == pytest.approx(closed_form_length(i), rel=1e-12)
        assert p["round_ms"] == pytest.approx(cheap(i))
        assert p["delta_round_ms"] == pytest.approx(cheap(i) - (10.0 if i == 1 else cheap(i - 1)))
        assert p["source"] == "measured"
    assert pos[0]["delta_round_ms"] == pytest.approx(0.8)
    assert pos[4]["delta_round_ms"] == pytest.approx(1.6)
    assert pos[3]["marginal_gain"] / closed_form_length(3) > pos[3]["delta_round_ms"] / cheap(3)
    assert pos[4]["marginal_gain"] / closed_form_length(4) < pos[4]["delta_round_ms"] / cheap(4)


def test_marginal_returns_of_the_costly_model(tmp_path):
    """costly: only the first position pays (10·1.8/15.8 = 1.139 > 1; 2.44/23.2 < 1.8/15.8)."""
    ws = api.open_traces(sweep(tmp_path, costly))
    (res,) = marginal_returns(ws.con, "spec")
    ws.close()
    assert [p["pays"] for p in res["positions"]][:3] == [True, False, False]
    assert res["largest_paying_gamma"] == 1


def test_marginal_returns_use_the_fit_where_a_length_was_not_measured(tmp_path):
    """γ = 1 and 3 measured only; T = 10 + 0.5 X exactly, so T(2) = 10 + 0.5·3 = 11.5 from the fit,
    and position 2 compares fitted T(2) with fitted T(1)."""
    t = Traces().deployment("spec", gamma=3).deployment("base", "none")
    for gamma in (1, 3):
        for _ in range(3):
            t.step("spec", [(gamma, gamma)], 10 + 0.5 * (gamma + 1))
    t.baseline("base", 1, 10.0)
    ws = api.open_traces(t.write(tmp_path))
    (res,) = marginal_returns(ws.con, "spec")
    ws.close()
    pos = {p["position"]: p for p in res["positions"]}
    assert pos[1]["source"] == "measured" and pos[1]["round_ms"] == pytest.approx(11.0)
    assert pos[2]["source"] == "fit" and pos[2]["round_ms"] == pytest.approx(11.5)
    assert pos[2]["prev_round_ms"] == pytest.approx(11.0)
    assert pos[3]["source"] == "fit" and pos[3]["round_ms"] == pytest.approx(12.0)
    # every draft was accepted: a_i = 1, E(i) = i + 1, and every position pays
    assert [p["pays"] for p in res["positions"]] == [True, True, True]
    assert math.isclose(pos[3]["marginal_gain"], 1.0)


# --------------------------------------------------------------------------- the non-negative fit

def test_a_negative_cost_per_token_is_held_at_0(tmp_path):
    """Batch size 1, γ = 1, 2, 3 (X = 2, 3, 4) taking 10.2, 10.0, 9.8 ms: the unconstrained fit
    is T = 10.6 − 0.2 X, a step that verifies more tokens taking less time. Held at β_tokens ≥ 0
    the best fit is α alone: α = mean T = 10.0, SSE = SST = 0.04 + 0 + 0.04, so R² = 0 and
    RMSE = √(0.08 / 3). Too few distinct X (3 < 4) for the quadratic term."""
    t = Traces().deployment("spec", gamma=3).deployment("base", "none")
    for gamma, ms in ((1, 10.2), (2, 10.0), (3, 9.8)):
        t.step("spec", [(gamma, gamma)], ms)
    t.baseline("base", 1, 10.0)
    (fit,) = fits_of(t.write(tmp_path))
    assert fit["bound"] == ["beta_tokens"]
    assert fit["unconstrained"] == {"beta_tokens": pytest.approx(-0.2, rel=1e-9)}
    assert fit["beta_tokens"] == 0.0 and fit["alpha"] == pytest.approx(10.0, rel=1e-12)
    assert fit["quadratic"] is False and fit["q"] is None
    assert fit["r2"] == pytest.approx(0.0, abs=1e-12)
    assert fit["rmse"] == pytest.approx(math.sqrt(0.08 / 3), rel=1e-9)
    assert fit["residuals"] == {"1": pytest.approx(0.2), "2": pytest.approx(0.0, abs=1e-9),
                                "3": pytest.approx(-0.2)}


def test_a_negative_cost_per_request_is_held_at_0_and_tokens_refitted(tmp_path):
    """T = 3 + 0.05 X − 0.1 B exactly on the grid γ = 1, 2, 3 × B = 70, 90, 120 (X = B(γ + 1)).
    The unconstrained fit recovers β_batch = −0.1; held at 0, T is fitted on X alone, by hand:

        X: 140 180 240 | 210 270 360 | 280 360 480      mean 2520 / 9 = 280
        T:   3   3   3 | 6.5 7.5   9 |  10  12  15      mean 69 / 9 = 23/3
        Sxx = Σ(X − 280)² = 89,000;  Sxy = 3,310;  Syy = 675.5 − 529 = 146.5
        β_tokens = 3,310 / 89,000 = 0.0371910;  α = 23/3 − 280 · β_tokens = −2.74682
        R² = Sxy² / (Sxx · Syy) = 10,956,100 / 13,038,500 = 0.840288

    α stays unconstrained: it is the time at X = B = 0, far outside the bucket, and the fit is
    positive wherever steps ran (at X = 140: −2.747 + 5.207 = 2.46 ms)."""
    (fit,) = fits_of(grid_traces(tmp_path, lambda x, b: 3.0 + 0.05 * x - 0.1 * b))
    assert fit["bound"] == ["beta_batch"]
    assert fit["unconstrained"] == {"beta_batch": pytest.approx(-0.1, rel=1e-9)}
    assert fit["beta_batch"] == 0.0 and fit["terms"] == ["tokens_verified", "batch_size"]
    assert fit["beta_tokens"] == pytest.approx(3310 / 89000, rel=1e-12)
    assert fit["alpha"] == pytest.approx(23 / 3 - 280 * 3310 / 89000, rel=1e-12)
    assert fit["r2"] == pytest.approx(3310 ** 2 / (89000 * 146.5), rel=1e-12)
    # with β_batch held, the quadratic in X has q = −2.8e-6 < 0 (numpy's lstsq on the 9 points): held at
    # 0 it is the linear fit again, so it is not kept
    assert fit["quadratic"] is False


def test_no_constraint_binds_on_a_physical_model(tmp_path):
    (fit,) = fits_of(grid_traces(tmp_path, lambda x, b: 3.0 + 0.05 * x + 0.2 * b))
    assert fit["bound"] == [] and fit["unconstrained"] == {}
