"""The n-gram replay (analyzer.replay, the suffix drafter and the fast replay in
analyzer.ngram, and ``specan replay-ngram``): by hand, against the simulator's
real n-gram deployment, and through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from analyzer.api import open_traces
from analyzer.cli import main
from analyzer.analysis.ngram import (match_table, propose, propose_suffix, replay_batch, replay_request,
                            replay_request_suffix, replay_rounds)
from analyzer.analysis.config import Evidence, Intervals
from analyzer.analysis.replay import replay_ngram
from analyzer.analysis.replay_cost import GROUPS, OWN, Bucket, DeploymentCost, Replayed, bootstrap_weights, predict
from analyzer.render.replay import render_markdown
from analyzer.simulate.traces import simulate
from tracebuilder import at, deployment, round_row, write_traces

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- by hand
#
#   position  0  1  2  3  4  5  6  7  8  9  10 11 | 12 13 14 15 16
#   token     1  2  3  4  5  6  9  2  3  7  1  2  |  3  4  5  6  8
#             prompt                              |  output
PROMPT = [1, 2, 3, 4, 5, 6, 9, 2, 3, 7, 1, 2]
OUTPUT = [3, 4, 5, 6, 8]


def both_replays(kind, min_n, longest, k):
    """The reference replay and the fast one, checked equal."""
    reference = (replay_request if kind == "prompt_lookup" else replay_request_suffix)(
        PROMPT, OUTPUT, min_n, longest, k)
    fast = [tuple(r) for r in replay_rounds(PROMPT, OUTPUT, min_n, longest, k, kind).tolist()]
    assert fast == reference
    return reference


def test_prompt_lookup_by_hand():
    # n = 2 only, k = 3. output[0] = 3 comes from prefill; the rounds start at p = 1.
    # p=1: context ends [..., 1, 2, 3]. The 2-gram [2, 3] ended earlier at 2 and at 8;
    #      the most recent is 8, followed by [7, 1, 2]. The output goes on [4, 5, 6]:
    #      K = 0, commit 1.
    # p=2: context ends [3, 4]; [3, 4] ended at 3, followed by [5, 6, 9]. The output
    #      goes on [5, 6, 8]: K = 2, commit min(K + 1, 5 - 2) = 3, and p = 5 ends it.
    assert propose(PROMPT + OUTPUT[:1], 2, 2, 3) == [7, 1, 2]
    assert both_replays("prompt_lookup", 2, 2, 3) == [(3, 0, 1), (3, 2, 3)]
    # n = 2..5, k = 4: at p=1 the longest match is [1, 2, 3] (n = 3, at 0..2; at 6..8
    # only [2, 3] matches, 9 != 1), followed by [4, 5, 6, 9]. Against [4, 5, 6, 8]:
    # K = 3, commit 4, done in one round.
    assert both_replays("prompt_lookup", 2, 5, 4) == [(4, 3, 4)]


def test_suffix_by_hand():
    # max_k = 4: at p=1 the longest earlier match is m = 3 ([1, 2, 3] at 0..2), so
    # γ = min(4, 3) = 3 drafts [4, 5, 6], all accepted: K = 3, commit 4. Prompt lookup
    # with k = 4 drafted a 4th token (9) that was rejected; the accepted length is the same.
    assert propose_suffix(PROMPT + OUTPUT[:1], 2, 32, 4) == [4, 5, 6]
    assert both_replays("suffix", 2, 32, 4) == [(3, 3, 4)]
    # max_k = 2: p=1 drafts min(2, 3) = 2 tokens [4, 5]: K = 2, commit 3.
    # p=4: the context ends [..., 7, 1, 2, 3, 4, 5, 6]; its last 6 tokens occurred at 0..5
    #      (a 7th would lie before position 0), so m = 6, followed by [9, 2]:
    #      γ = min(2, 6) = 2. One output token is left, 8: K = 0, commit 1.
    assert both_replays("suffix", 2, 32, 2) == [(2, 2, 3), (2, 0, 1)]
    # A match shorter than min_n drafts nothing: with min_n = 4 the 3-token match at p=1
    # is too short (commit 1); at p=2 the context ends [1, 2, 3, 4], m = 4, γ = 4 drafts
    # [5, 6, 9, 2] against [5, 6, 8]: K = 2, commit 3.
    assert both_replays("suffix", 4, 32, 4) == [(0, 0, 1), (4, 2, 3)]


def test_match_table_by_hand():
    length, end = match_table(PROMPT + OUTPUT, 8)
    # Position 8 (token 3): [2, 3] ended at 2 before, [9, 2, 3] never did.
    assert (length[8], end[8]) == (2, 2)
    # Position 15 (token 6): [1, 2, 3, 4, 5, 6] ended at 5; [7, 1, ..., 6] never did.
    assert (length[15], end[15]) == (6, 5)
    assert (length[0], end[0]) == (0, -1)


def test_propose_suffix_arguments():
    with pytest.raises(ValueError):
        propose_suffix([1, 2], 3, 2, 1)
    with pytest.raises(ValueError):
        propose_suffix([1, 2], 1, 2, 0)
    assert propose_suffix([], 1, 4, 4) == []
    assert propose_suffix([5, 5], 1, 4, 4) == [5]  # m = 1 earns one draft


def test_fast_replay_matches_the_reference():
    rng = np.random.default_rng(11)
    for _ in range(400):
        vocab = int(rng.integers(1, 5))
        prompt = rng.integers(-2, vocab, int(rng.integers(0, 20))).tolist()
        output = rng.integers(-2, vocab, int(rng.integers(0, 30))).tolist()
        min_n = int(rng.integers(1, 4))
        longest = min_n + int(rng.integers(0, 5))
        k = int(rng.integers(1, 6))
        fast = replay_rounds(prompt, output, min_n, longest, k).tolist()
        assert [tuple(r) for r in fast] == replay_request(prompt, output, min_n, longest, k)
        fast = replay_rounds(prompt, output, min_n, longest, k, "suffix").tolist()
        assert [tuple(r) for r in fast] == replay_request_suffix(prompt, output, min_n, longest, k)


def test_batched_requests_never_match_each_other():
    rng = np.random.default_rng(12)
    for _ in range(100):
        requests = [(rng.integers(0, 3, int(rng.integers(0, 12))).tolist(),
                     rng.integers(0, 3, int(rng.integers(0, 20))).tolist()) for _ in range(int(rng.integers(1, 6)))]
        tokens = np.concatenate([np.asarray(p + o, dtype=np.int64) for p, o in requests])
        bounds = np.concatenate([[0], np.cumsum([len(p) + len(o) for p, o in requests])])
        for kind, reference in (("prompt_lookup", replay_request), ("suffix", replay_request_suffix)):
            rounds, owner = replay_batch(tokens, bounds, [len(p) for p, _ in requests], 2, 5, 4, kind)
            expected = [(r, tuple(x)) for r, (p, o) in enumerate(requests) for x in reference(p, o, 2, 5, 4)]
            assert list(zip(owner.tolist(), map(tuple, rounds.tolist()))) == expected


# --------------------------------------------------------------------------- a hand-built trace

def request(deployment_id, request_id, **extra):
    return {"deployment_id": deployment_id, "request_id": request_id, "category": "code",
            "arrival_time": at(0), "first_token_time": at(10), "finish_time": at(100),
            "prompt_tokens": len(PROMPT), "output_tokens": len(OUTPUT), "finish_reason": "stop",
            "temperature": 0.0, **extra}


def step(deployment_id, step_id, batch_size, duration_ms, prefill=0):
    return {"deployment_id": deployment_id, "step_id": step_id, "start_time": at(step_id),
            "duration_ms": duration_ms, "batch_size": batch_size, "num_prefill_tokens": prefill}


IDS = {"prompt_token_ids": PROMPT, "output_token_ids": OUTPUT}
NGRAM_CONFIG = json.dumps({"method": "ngram", "num_speculative_tokens": 3,
                           "prompt_lookup_min": 2, "prompt_lookup_max": 2})


@pytest.fixture
def hand_trace(tmp_path):
    """An n-gram deployment `ng` and its implicitly matched baseline `base`.

    ng's rounds (all of request r1), by step: batch 1 for 10 and 14 ms, batch 2 for
    20 ms, batch 3 for 30 ms (a bucket the baseline lacks), and a prefill step of
    50 ms. base, one token per round, over 10 requests b0-b9 (a t0 needs 20 steps and
    10 requests: the [evidence] floors): 20 steps at batch 1 taking 5 and 7 ms in
    turn, and 20 steps at batch 2 of 8 ms, so t0(1) = (10 · 5 + 10 · 7) / 20 = 6 ms
    and t0(2) = 8 ms. Request r2 has no token ids.
    """
    base_steps = ([step("base", 11 + i, 1, 5.0 if i % 2 == 0 else 7.0) for i in range(20)]
                  + [step("base", 31 + i, 2, 8.0) for i in range(20)])
    base_rounds = ([round_row("base", f"b{i % 10}", i // 10, 0, 0, step_id=11 + i) for i in range(20)]
                   + [round_row("base", f"b{(2 * i + slot) % 10}", 2 + (2 * i + slot) // 10, 0, 0, step_id=31 + i)
                      for i in range(20) for slot in range(2)])
    return write_traces(
        tmp_path / "hand",
        deployments=[deployment("ng", "ngram", 3, spec_config=NGRAM_CONFIG), deployment("base", "none")],
        requests=[request("ng", "r1", **IDS), request("ng", "r2", temperature=0.7),
                  *[request("base", f"b{i}", **IDS) for i in range(10)]],
        steps=[step("ng", 1, 1, 10.0), step("ng", 2, 1, 14.0), step("ng", 3, 2, 20.0),
               step("ng", 4, 3, 30.0), step("ng", 5, 1, 50.0, prefill=100), *base_steps],
        rounds=[round_row("ng", "r1", 0, 3, 0, step_id=1), round_row("ng", "r1", 1, 3, 2, step_id=2),
                round_row("ng", "r1", 2, 0, 0, step_id=3), round_row("ng", "r1", 3, 0, 0, step_id=4),
                round_row("ng", "r1", 4, 0, 0, step_id=5), *base_rounds],
    )


def test_predicted_speedup_is_the_hand_formula(hand_trace):
    ws = open_traces(hand_trace)
    try:
        res = replay_ngram(ws.con, min_n=2, max_n=2, k=3)
    finally:
        ws.close()
    (ng,) = [r for r in res["deployments"] if r["deployment_id"] == "ng"]
    (ng_code,) = [r for r in res["categories"] if r["deployment_id"] == "ng"]
    # The replay of r1 (test_prompt_lookup_by_hand): rounds (3,0,1) and (3,2,3).
    for row in (ng, ng_code):
        assert (row["num_requests"], row["num_rounds"], row["num_spec_rounds"], row["num_draft_tokens"],
                row["num_accepted_tokens"], row["num_committed_tokens"]) == (1, 2, 2, 6, 2, 4)
        assert row["mean_accept_length"] == 2.0 and row["tokens_per_round"] == 2.0
        assert row["acceptance_rate"] == pytest.approx(1 / 3) and row["no_draft_share"] == 0.0
        assert row["sampled_share"] == 0.0
        # Covered decode-only buckets 1 (2 rounds, 24 ms) and 2 (1 round, 20 ms); the
        # batch-3 round has no t0, the prefill round is not decode-only:
        # 2 tokens/round × (6 · 2 + 8 · 1) / (24 + 20) = 40 / 44.
        assert row["predicted_speedup"] == pytest.approx(2 * (6 * 2 + 8 * 1) / (24 + 20))
        assert row["predicted_speedup_coverage"] == pytest.approx(3 / 5)
        assert row["predicted_speedup_note"] is None
        assert row["baseline_id"] == "base"
    # The measured values of an ngram deployment sit beside the prediction.
    assert ng["measured"]["num_rounds"] == 5 and ng["measured"]["no_draft_share"] == pytest.approx(3 / 5)
    assert ng["measured"]["mean_accept_length"] == pytest.approx(1 + 2 / 2)
    assert ng["measured"]["speedup"] == pytest.approx((6 * (1 + 3) + 8 * 1) / (24 + 20))
    assert ng_code["measured"]["tokens_per_round"] == pytest.approx(7 / 5)
    # The baseline itself replays its 10 requests, every one the same tokens as r1: 2 tokens per
    # round. Verification free, a round costs the baseline's own t0 (one token per round), so the
    # upper bound is 2 · Σ t0·n / Σ t0·n = 2 exactly; ng's fit can't price a verified token (its two
    # batch-1 steps both verified 4 tokens), so there is no priced prediction, and it says why.
    (base,) = [r for r in res["deployments"] if r["deployment_id"] == "base"]
    assert base["predicted_speedup"] is None and base["predicted_speedup_upper_bound"] == pytest.approx(2.0)
    assert base["predicted_speedup_note"].startswith("no batch bucket can be priced: ng's round-cost fit can't "
                                                      "price a verified token here")
    assert base["measured"] is None
    # One request is one bootstrap group: every replicate that draws it gives the point.
    assert ng["predicted_speedup_interval"] == pytest.approx([40 / 44, 40 / 44])
    assert ng["round_cost_assumption"] == "own_round_time" and ng["predicted_by_batch"] is None


def test_suffix_prediction_uses_the_same_costs(hand_trace):
    ws = open_traces(hand_trace)
    try:
        res = replay_ngram(ws.con, min_n=2, k=4, variant="suffix")
    finally:
        ws.close()
    (ng,) = [r for r in res["deployments"] if r["deployment_id"] == "ng"]
    # One round (3, 3, 4) (test_suffix_by_hand): 4 tokens per round.
    assert (ng["num_rounds"], ng["num_draft_tokens"], ng["num_accepted_tokens"]) == (1, 3, 3)
    assert ng["predicted_speedup"] == pytest.approx(4 * 20 / 44)
    assert res["parameters"] == {"min_n": 2, "max_match": 32, "max_k": 4,
                                 "gamma": "min(max_k, match length)", "category": None}


def test_requests_without_token_ids_are_counted_and_noted(hand_trace):
    ws = open_traces(hand_trace)
    try:
        res = replay_ngram(ws.con, min_n=2, max_n=2, k=3)
    finally:
        ws.close()
    assert res["requests_without_token_ids"] == {"ng": 1}
    assert res["num_requests_replayed"] == 11       # r1 and the baseline's 10
    assert any("left out: ng 1." in note for note in res["notes"])
    # The deployment's configuration matches the parameters: no mismatch note.
    assert not any("is configured with" in note for note in res["notes"])


def test_bad_input(hand_trace):
    ws = open_traces(hand_trace)
    try:
        with pytest.raises(ValueError, match="min_n <= max_n"):
            replay_ngram(ws.con, min_n=3, max_n=2)
        with pytest.raises(ValueError, match="no request has category 'chat'"):
            replay_ngram(ws.con, category="chat")
        with pytest.raises(ValueError, match="unknown variant"):
            replay_ngram(ws.con, variant="eagle")
        res = replay_ngram(ws.con, min_n=2, max_n=5, k=4, category="code")
        assert res["deployments"] == [] and {r["category"] for r in res["categories"]} == {"code"}
        assert any("is configured with prompt_lookup_min=2, prompt_lookup_max=2" in n for n in res["notes"])
    finally:
        ws.close()


def test_no_token_ids_at_all(tmp_path):
    path = write_traces(tmp_path / "t", deployments=[deployment("a")], requests=[request("a", "r1")],
                        rounds=[round_row("a", "r1", 0, 0, 0)])
    ws = open_traces(path)
    try:
        with pytest.raises(ValueError, match="no request has both"):
            replay_ngram(ws.con)
    finally:
        ws.close()


# --------------------------------------------------------------------------- the simulator

@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("sim")
    simulate(outdir, seed=1, requests=20, days=1)
    ws = open_traces(outdir)
    yield ws
    ws.close()


def test_replay_reproduces_the_simulated_ngram_deployment(simulated):
    """The simulator's ngram-bf16 rounds are the greedy replay of the same drafter with
    n = 2..5 and k = 4, so every count must match exactly, category by category."""
    res = replay_ngram(simulated.con, min_n=2, max_n=5, k=4)
    measured = {row[0]: row[1:] for row in simulated.con.execute("""
        select category, num_rounds, num_spec_rounds, num_draft_tokens, num_accepted_tokens,
               num_committed_tokens, mean_accept_length, tokens_per_round, acceptance_rate
        from accept_length_by_category where deployment_id = 'ngram-bf16'""").fetchall()}
    replayed = {r["category"]: r for r in res["categories"] if r["deployment_id"] == "ngram-bf16"}
    assert replayed.keys() == measured.keys() and len(measured) == 4
    for category, values in measured.items():
        r = replayed[category]
        got = (r["num_rounds"], r["num_spec_rounds"], r["num_draft_tokens"], r["num_accepted_tokens"],
               r["num_committed_tokens"], r["mean_accept_length"], r["tokens_per_round"], r["acceptance_rate"])
        assert got == values, category
        assert all(isinstance(v, int) for v in got[:5])
        assert r["measured"]["mean_accept_length"] == r["mean_accept_length"]
        assert r["measured"]["no_draft_share"] == r["no_draft_share"]
    (dep,) = [r for r in res["deployments"] if r["deployment_id"] == "ngram-bf16"]
    assert dep["mean_accept_length"] == dep["measured"]["mean_accept_length"]
    assert dep["num_committed_tokens"] == dep["measured"]["num_committed_tokens"]
    assert res["tokens_per_s"] > 0 and res["tokens_replayed"] > 0
    assert render_markdown([res]).startswith("# n-gram replay")


# --------------------------------------------------------------------------- CLI

def test_cli_markdown_and_json(hand_trace):
    runner = CliRunner()
    result = runner.invoke(main, ["replay-ngram", str(hand_trace), "--min-n", "2", "--max-n", "2", "--k", "3"])
    assert result.exit_code == 0, result.output
    assert "## Prompt lookup (n = 2..2, k = 3)" in result.stdout
    assert "## Suffix drafting" in result.stdout
    assert "Greedy assumption" in result.stdout and "exact for greedy decoding (temperature 0)" in result.stdout
    assert ("| ng | **all** | 1 | 2.000 | 2.000 | 0.0% | 0.909× [0.909, 0.909] | own | 2.000 | 1.400 | 60.0% | "
            "0.727× |") in result.stdout

    result = runner.invoke(main, ["replay-ngram", str(hand_trace), "--variant", "prompt-lookup",
                                  "--format", "json", "--progress"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)  # progress went to stderr
    assert [r["variant"] for r in doc["replays"]] == ["prompt_lookup"]
    assert any(note.startswith("Greedy assumption") for note in doc["replays"][0]["notes"])
    assert "replayed" in result.stderr


@pytest.mark.parametrize("args, fragment", [
    (["--min-n", "3", "--max-n", "2"], "need min_n <= max_n"),
    (["--k", "0"], "k >= 1"),
    (["--category", "nope"], "no request has category 'nope'"),
])
def test_cli_bad_input_exits_2_with_one_line(hand_trace, args, fragment):
    result = CliRunner().invoke(main, ["replay-ngram", str(hand_trace), *args])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and fragment in result.stderr


def test_cli_missing_traces(tmp_path):
    result = CliRunner().invoke(main, ["replay-ngram", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1


def test_cli_without_a_requests_table(tmp_path):
    path = write_traces(tmp_path / "t", deployments=[deployment("a")], rounds=[round_row("a", "r1", 0, 0, 0)])
    result = CliRunner().invoke(main, ["replay-ngram", str(path)])
    assert result.exit_code == 2 and "the requests table is absent" in result.stderr
    assert len(result.stderr.splitlines()) == 1


# --------------------------------------------------------------------------- a baseline: turning n-gram on
#
# base (method none) and ng (ngram, matched to base). Every base request is PROMPT /
# OUTPUT, whose replay with n = 2, k = 3 is (3,0,1), (3,2,3): tpr = 4 / 2 = 2 tokens per
# round and d̄ = 6 / 2 = 3 drafts per round.
#
# base's decode steps, one token per round:
#   bucket 1: steps 1, 2 (b1) and 3 (b2), 5 + 7 + 6 ms: n(1) = 3 rounds, t0(1) = 6 ms,
#             3 steps and 2 requests, B̄ = 1;
#   bucket 2: steps 4, 5, each with b1 and b2, 8 ms: n(2) = 4 rounds, t0(2) = 8 ms,
#             2 steps and 2 requests, B̄ = 2.
# ng's steps, for its round-cost fit T = α + β·X (B never varies within a bucket):
#   bucket 1: X = 1 in 6.5 ms, X = 4 in 8 ms: exactly T = 6 + 0.5·X, R² = 1, X in 1-4;
#   bucket 2: X = 2 in 7 ms, X = 8 in 8 and 12 ms: least squares through (2, 7) and the
#             mean (8, 10), T = 6 + 0.5·X again, with SSE = 8 and SST = 14: R² = 3/7; X in 2-8.

BASE_STEPS = [(1, 1, 5.0, ["b1"]), (2, 1, 7.0, ["b1"]), (3, 1, 6.0, ["b2"]),
              (4, 2, 8.0, ["b1", "b2"]), (5, 2, 8.0, ["b1", "b2"])]
NG_STEPS = [(11, 1, 6.5, [0]), (12, 1, 8.0, [3]), (13, 2, 7.0, [0, 0]), (14, 2, 8.0, [3, 3]), (15, 2, 12.0, [3, 3])]
LOW_FLOORS = "[evidence]\nmin_baseline_steps = 2\nmin_baseline_requests = 2\n"


@pytest.fixture
def baseline_trace(tmp_path):
    return write_baseline_trace(tmp_path / "baseline", [request("base", "b1", **IDS), request("base", "b2", **IDS)])


def write_baseline_trace(path, base_requests):
    steps, rounds, next_round = [], [], {}
    for dep, plan in (("base", BASE_STEPS), ("ng", NG_STEPS)):
        for step_id, batch, ms, members in plan:
            steps.append(step(dep, step_id, batch, ms))
            for i, member in enumerate(members):
                request_id = member if dep == "base" else f"n{i + 1}"
                drafted = 0 if dep == "base" else member
                idx = next_round.get((dep, request_id), 0)
                next_round[dep, request_id] = idx + 1
                rounds.append(round_row(dep, request_id, idx, drafted, 0, step_id=step_id))
    return write_traces(
        path, deployments=[deployment("base", "none"), deployment("ng", "ngram", 3, spec_config=NGRAM_CONFIG)],
        requests=[*base_requests, request("ng", "n1"), request("ng", "n2")], steps=steps, rounds=rounds)


def baseline_row(trace, tmp_path, config: str | None, *args):
    """The base row of one replay through the CLI (JSON), with ``config`` as its --config."""
    options = ["--variant", "prompt-lookup", "--format", "json", *args]
    if config is not None:
        path = tmp_path / "floors.toml"
        path.write_text(config)
        options += ["--config", str(path)]
    result = CliRunner().invoke(main, ["replay-ngram", str(trace), *options])
    assert result.exit_code == 0, result.output
    (replay,) = json.loads(result.stdout)["replays"]
    (base,) = [r for r in replay["deployments"] if r["deployment_id"] == "base"]
    return base, replay


def test_baseline_prediction_with_the_ngram_deployments_fit(baseline_trace, tmp_path):
    base, replay = baseline_row(baseline_trace, tmp_path, LOW_FLOORS, "--min-n", "2", "--max-n", "2", "--k", "3")
    assert (base["num_requests"], base["tokens_per_round"]) == (2, 2.0)
    # X = B̄·(1 + d̄): 4 tokens at batch 1, T = 8 ms; 8 tokens at batch 2, T = 10 ms.
    # speedup = tpr · Σ t0·n / Σ n·T = 2 · (6·3 + 8·4) / (8·3 + 10·4) = 100 / 64.
    assert base["predicted_speedup"] == pytest.approx(100 / 64)
    assert base["round_cost_assumption"] == "cost_fit" and base["round_cost_source"] == "ng"
    assert base["round_cost_statement"] == (
        "if verifying the replay's 3.00 drafted tokens per request per round costs what it costs ng "
        "(its round-cost fit per batch bucket, R² 0.43-1.00)")
    # verification free: T = t0, so the speedup is tpr itself
    assert base["predicted_speedup_upper_bound"] == pytest.approx(2.0)
    assert base["predicted_speedup_coverage"] == pytest.approx(1.0)
    # two requests in (at most) two bootstrap groups: the interval lies between their values,
    # and both are the same request, so it is the point
    assert base["predicted_speedup_interval"] == pytest.approx([100 / 64, 100 / 64])
    one, two = base["predicted_by_batch"]
    assert (one["batch_bucket"], one["decode_steps"], one["decode_requests"], one["num_rounds"]) == ("1", 3, 2, 3)
    assert (one["t0_ms"], one["mean_batch_size"], one["tokens_verified_per_step"]) == pytest.approx((6, 1, 4))
    assert (one["round_ms"], one["speedup"], one["fit_r2"]) == pytest.approx((8, 2 * 6 / 8, 1))
    assert (two["batch_bucket"], two["decode_steps"], two["num_rounds"], two["tokens_verified_per_step"]) == (
        "2", 2, 4, pytest.approx(8))
    assert (two["round_ms"], two["speedup"], two["fit_r2"]) == pytest.approx((10, 2 * 8 / 10, 3 / 7))
    assert one["left_out"] is None and two["left_out"] is None
    (code,) = [r for r in replay["categories"] if r["deployment_id"] == "base"]
    assert code["predicted_speedup"] == pytest.approx(100 / 64) and code["predicted_by_batch"] is None


def test_a_category_is_priced_at_its_deployments_drafts_per_round(tmp_path):
    # b2 (chat) never repeats: rounds (0,0,1), (0,0,1). base: tpr = 6/4 = 1.5, d̄ = 6/4 = 1.5,
    # so every step verifies X = B̄·2.5: T(1) = 6 + 0.5·2.5 = 7.25, T(2) = 6 + 0.5·5 = 8.5.
    chat = {"prompt_token_ids": [10, 11, 12], "output_token_ids": [13, 14, 15]}
    trace = write_baseline_trace(tmp_path / "mix", [request("base", "b1", **IDS),
                                                    request("base", "b2", category="chat", **chat)])
    base, replay = baseline_row(trace, tmp_path, LOW_FLOORS.replace("requests = 2", "requests = 1"),
                                "--min-n", "2", "--max-n", "2", "--k", "3")
    assert base["predicted_speedup"] == pytest.approx(1.5 * (6 * 3 + 8 * 4) / (7.25 * 3 + 8.5 * 4))
    rows = {r["category"]: r for r in replay["categories"] if r["deployment_id"] == "base"}
    # code (b1): tpr 2 over its rounds, 2 in bucket 1 and 2 in bucket 2, at the same T
    assert rows["code"]["predicted_speedup"] == pytest.approx(2 * (6 * 2 + 8 * 2) / (7.25 * 2 + 8.5 * 2))
    # chat (b2): tpr 1, 1 round in bucket 1 and 2 in bucket 2: slower than plain decoding
    assert rows["chat"]["predicted_speedup"] == pytest.approx((6 * 1 + 8 * 2) / (7.25 * 1 + 8.5 * 2))
    assert rows["chat"]["predicted_speedup_upper_bound"] == pytest.approx(1.0)


def test_baseline_prediction_per_token_cost(baseline_trace, tmp_path):
    base, _ = baseline_row(baseline_trace, tmp_path, LOW_FLOORS, "--min-n", "2", "--max-n", "2", "--k", "3",
                           "--verify-cost-ms-per-token", "0.25")
    # T = t0 + c·B̄·d̄: 6 + 0.25·1·3 = 6.75 and 8 + 0.25·2·3 = 9.5
    assert base["predicted_speedup"] == pytest.approx(2 * (6 * 3 + 8 * 4) / (6.75 * 3 + 9.5 * 4))
    assert base["round_cost_assumption"] == "per_token" and base["round_cost_source"] is None
    assert [b["round_ms"] for b in base["predicted_by_batch"]] == pytest.approx([6.75, 9.5])
    assert "adds 0.25 ms per drafted token of the step (--verify-cost-ms-per-token)" in base["round_cost_statement"]


def test_baseline_buckets_below_the_floors_are_left_out(baseline_trace, tmp_path):
    # the defaults: 3 and 2 decode steps are below 20, 2 requests below 10
    base, replay = baseline_row(baseline_trace, tmp_path, None, "--min-n", "2", "--max-n", "2", "--k", "3")
    assert base["predicted_speedup"] is None
    assert base["predicted_speedup_note"] == "not enough data: 2 requests replayed (min_baseline_requests 10)"
    assert any("A batch bucket needs 20 decode steps and 10 requests" in n for n in replay["notes"])
    # three steps: bucket 1 stays, bucket 2 (two steps) goes
    base, _ = baseline_row(baseline_trace, tmp_path, LOW_FLOORS.replace("steps = 2", "steps = 3"),
                           "--min-n", "2", "--max-n", "2", "--k", "3")
    assert base["predicted_speedup"] == pytest.approx(2 * 6 * 3 / (8 * 3))
    assert base["predicted_speedup_upper_bound"] == pytest.approx(2.0)
    assert base["predicted_speedup_coverage"] == pytest.approx(3 / 7)
    two = base["predicted_by_batch"][1]
    assert two["left_out"] == "not enough data: 2 decode steps (min_baseline_steps 3)"
    assert two["speedup"] is None and two["speedup_upper_bound"] is None


def test_a_fit_extrapolates_only_above_min_fit_r2(baseline_trace, tmp_path):
    # n = 2..5, k = 4 replays PROMPT / OUTPUT as one round (4, 3, 4): tpr = 4, d̄ = 4.
    # X = 5 at batch 1 is past ng's 1-4 but R² = 1: T = 6 + 0.5·5 = 8.5. X = 10 at batch 2
    # is past 2-8 with R² 3/7 < 0.5: left out.
    base, _ = baseline_row(baseline_trace, tmp_path, LOW_FLOORS, "--min-n", "2", "--max-n", "5", "--k", "4")
    assert base["predicted_speedup"] == pytest.approx(4 * 6 / 8.5)
    assert base["predicted_speedup_upper_bound"] == pytest.approx(4.0)
    assert base["predicted_speedup_coverage"] == pytest.approx(3 / 7)
    one, two = base["predicted_by_batch"]
    assert one["round_ms"] == pytest.approx(8.5) and two["round_ms"] is None
    assert two["left_out"] == ("X = 10.0 tokens per step lies outside ng's measured 2-8 and its fit's R² (0.43) "
                               "is below min_fit_r2 (0.5)")
    assert two["speedup_upper_bound"] == pytest.approx(4.0)


def test_baseline_without_an_ngram_deployment_is_priced_free(baseline_trace, tmp_path):
    # ng's rounds name model m2: nothing is matched to base any more
    trace = baseline_trace
    deployments = [deployment("base", "none"), deployment("ng", "ngram", 3, spec_config=NGRAM_CONFIG, model="m2")]
    write_traces(trace, deployments=deployments)
    base, replay = baseline_row(trace, tmp_path, LOW_FLOORS, "--min-n", "2", "--max-n", "2", "--k", "3")
    assert base["round_cost_assumption"] == "free_verify"
    assert base["predicted_speedup"] == pytest.approx(2.0) == base["predicted_speedup_upper_bound"]
    assert base["round_cost_statement"].endswith(": an upper bound")
    assert ("No ngram deployment is matched to base, so verification is priced at 0: its predicted_speedup is the "
            "upper bound.") in replay["notes"]


def test_baseline_markdown(baseline_trace, tmp_path):
    config = tmp_path / "floors.toml"
    config.write_text(LOW_FLOORS)
    result = CliRunner().invoke(main, ["replay-ngram", str(baseline_trace), "--variant", "prompt-lookup",
                                       "--min-n", "2", "--max-n", "2", "--k", "3", "--config", str(config)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "| base | **all** | 2 | 2.000 | 2.000 | 0.0% | 1.562× [1.562, 1.562] | ng's fit | – | – | – | – |" in out
    assert "### base: turning prompt lookup on" in out
    assert ("Predicted **1.562× [1.562, 1.562]** if verifying the replay's 3.00 drafted tokens per request per "
            "round costs what it costs ng (its round-cost fit per batch bucket, R² 0.43-1.00); 2.000× [2.000, "
            "2.000] if verification were free (an upper bound). It rests on 2 replayed requests and 2 batch "
            "buckets (1, 2), 100.0% of base's rounds.") in out
    assert "| 1 | 3 | 2 | 3 | 6.000 | 1.0 | 4.0 | 8.000 | 1.00 | 1.500× | 2.000× |" in out
    assert "| 2 | 2 | 2 | 4 | 8.000 | 2.0 | 8.0 | 10.000 | 0.43 | 1.600× | 2.000× |" in out


@pytest.mark.parametrize("value", ["-0.1", "nan", "inf"])
def test_cli_verify_cost_must_be_a_finite_non_negative_number(hand_trace, value):
    result = CliRunner().invoke(main, ["replay-ngram", str(hand_trace), "--verify-cost-ms-per-token", value])
    assert result.exit_code == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and "verify_cost_ms_per_token >= 0" in result.stderr


def test_cli_bad_config_exits_2(hand_trace, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[evidence]\nmin_baseline_steps = 0\n")
    result = CliRunner().invoke(main, ["replay-ngram", str(hand_trace), "--config", str(path)])
    assert result.exit_code == 2 and "evidence.min_baseline_steps" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_interval_spans_the_groups_closed_form():
    """Two request groups, tokens per round 1 and 3 (2 rounds each). A replicate that
    draws only the first gives 1·K, only the second 3·K, K = Σ t0·n / Σ time; each
    happens in Pr(w1 > 0, w2 = 0) = (1 − e⁻¹)·e⁻¹ ≈ 23% of replicates, above 2.5%, so
    the 95% interval is exactly [K, 3K] around the pooled 8/4 = 2·K."""
    groups = np.zeros((GROUPS, 3), dtype=np.int64)
    groups[5] = (2, 2, 0)
    groups[40] = (2, 6, 8)
    replayed = Replayed(rounds=4, committed=8, drafted=8, groups=groups)
    cost = DeploymentCost("d", OWN, {"1": Bucket("1", 6.0), "2": Bucket("2", 8.0)})
    # bucket 1: 10 rounds in 80 ms; bucket 2: 5 rounds in 50 ms; bucket 3 has no t0
    cells = [("1", 10, 80.0), ("2", 5, 50.0), ("3", 5, 70.0)]
    k = (6 * 10 + 8 * 5) / (80 + 50)
    out = predict(replayed, cells, 25, cost, evidence=Evidence(), weights=bootstrap_weights(Intervals()))
    assert out["predicted_speedup"] == pytest.approx(2 * k)
    assert out["predicted_speedup_interval"] == pytest.approx([k, 3 * k])
    assert out["predicted_speedup_coverage"] == pytest.approx(15 / 25)
    assert out["predicted_speedup_upper_bound"] is None


def test_sample_baseline_prediction_lands_on_what_ngram_measured():
    """base-bf16 and ngram-bf16 serve the same requests on the same model and GPU; priced
    with ngram-bf16's round-cost fit, base-bf16's prediction must hold ngram-bf16's
    measured speedup in its interval, and lie within 2% of it (docs/tuning.md)."""
    ws = open_traces(ROOT / "sample_traces")
    try:
        res = replay_ngram(ws.con, min_n=2, max_n=5, k=4)
    finally:
        ws.close()
    rows = {r["deployment_id"]: r for r in res["deployments"]}
    base, ngram = rows["base-bf16"], rows["ngram-bf16"]
    measured = ngram["measured"]["speedup"]
    assert base["round_cost_source"] == "ngram-bf16" and base["num_requests"] == ngram["num_requests"] == 600
    lo, hi = base["predicted_speedup_interval"]
    assert lo <= measured <= hi
    assert abs(base["predicted_speedup"] / measured - 1) < 0.02
    # the same replay priced free is tokens per round, far above what verification allows
    assert base["predicted_speedup_upper_bound"] == pytest.approx(base["tokens_per_round"])
    assert base["predicted_speedup_upper_bound"] > hi
    # base-fp8 has only a draft-model deployment beside it: the upper bound, said so
    assert rows["base-fp8"]["round_cost_assumption"] == "free_verify"
    assert [b["left_out"] for b in base["predicted_by_batch"]] == [None] * 8
