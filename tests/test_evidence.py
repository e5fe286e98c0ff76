"""The sample-size guards of the [evidence] section: a batch bucket's t0 rests on enough
baseline steps and requests (baseline_t0, bucket_evidence, speedup_uncovered).

Every count and ratio below is worked out by hand from the traces each test builds.
A round's time is its step's duration (every request in a step waits for it), so
t0(b) = Σ round time / Σ committed = the step time per token of one request.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.cli import main
from tracebuilder import deployment, lift_floors, round_row, step, write_traces


class Builder:
    """Steps and their rounds, step ids and round indexes numbered as they are added."""

    def __init__(self):
        self.steps, self.rounds = [], []
        self.next_step: dict[str, int] = {}
        self.next_round: dict[tuple[str, str], int] = {}

    def step(self, dep: str, duration_ms: float, rounds: list[tuple[str, int, int]], *, batch_size=None,
             context_len=None, prefill=0) -> Builder:
        """One step of ``dep``: ``rounds`` are (request_id, drafted, committed); a round
        accepts committed − 1 of its drafts."""
        sid = self.next_step.get(dep, 0)
        self.next_step[dep] = sid + 1
        self.steps.append(step(dep, sid, duration_ms, batch_size or len(rounds), num_prefill_tokens=prefill))
        for request_id, drafted, committed in rounds:
            idx = self.next_round.get((dep, request_id), 0)
            self.next_round[(dep, request_id)] = idx + 1
            extra = {} if context_len is None else {"context_len": context_len}
            self.rounds.append(round_row(dep, request_id, idx, drafted, committed - 1, committed, step_id=sid,
                                         **extra))
        return self

    def write(self, root, deployments):
        return write_traces(root, deployments=deployments, steps=self.steps, rounds=self.rounds)


def issue_case(root):
    """The issue's case. base: 1,200 rounds at batch 1, 10 ms steps, 12 requests of 100
    rounds: t0(1) = 10 ms. Then a single 90 ms step at batch 100, one round of each of
    100 other requests: t0(65-128) = 100 · 90 / 100 = 90 ms, resting on 1 step.

    spec: 400 rounds at batch 1 (10 requests of 40), 10 ms steps, each request's rounds
    committing 2, 2, 2, 2, 1 in turn (mean 1.8): speedup(1) = 10 · 720 / 4000 = 1.8. Then 8 steps of 25 ms at batch
    100, each one round of 100 requests committing 2: 1,600 tokens in 8 · 100 · 25 =
    20,000 ms. With the one-step t0 the speedup would be (10 · 720 + 90 · 1600) /
    (4000 + 20000) = 151,200 / 24,000 = 6.3."""
    b = Builder()
    for i in range(1200):
        b.step("base", 10.0, [(f"b{i % 12}", 0, 1)])
    b.step("base", 90.0, [(f"w{j}", 0, 1) for j in range(100)])
    for i in range(400):
        b.step("spec", 10.0, [(f"s{i % 10}", 4, 1 if i // 10 % 5 == 4 else 2)])
    for _ in range(8):
        b.step("spec", 25.0, [(f"h{j}", 4, 2) for j in range(100)])
    return b.write(root, [deployment("spec"), deployment("base", "none")])


def report_json(root, *args) -> dict:
    result = CliRunner().invoke(main, ["report", str(root), "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def spec_entry(doc: dict) -> dict:
    return next(d for d in doc["deployments"] if d["deployment_id"] == "spec")


def test_one_baseline_step_does_not_make_a_1_8x_deployment_6_3x(tmp_path):
    doc = report_json(issue_case(tmp_path))
    spec = spec_entry(doc)
    assert spec["speedup"] == pytest.approx(1.8)
    # covered: the 720 tokens at batch 1 of 720 + 1,600
    assert spec["speedup_coverage"] == pytest.approx(720 / 2320)
    assert spec["uncovered_buckets"] == [{"batch_bucket": "65-128", "committed_share": pytest.approx(1600 / 2320),
                                          "reason": "few_baseline_steps", "baseline_steps": 1,
                                          "baseline_requests": 100}]
    assert ("spec: batch 65-128 left out of the speedup: base's t0 there rests on 1 step and 100 requests "
            "(20 steps and 10 requests needed); 69.0% of spec's committed tokens ran there") in doc["notes"]
    # the load curve leaves the bucket's t0 out too: one definition, not one per consumer
    curve = {r["batch_bucket"]: r for r in doc["load_curve"] if r["deployment_id"] == "spec"}
    assert curve["1"]["t0_ms"] == pytest.approx(10.0) and curve["1"]["speedup"] == pytest.approx(1.8)
    assert curve["65-128"]["t0_ms"] is None and curve["65-128"]["speedup"] is None
    # the interval covers the same bucket only: each of spec's requests at batch 1 commits
    # 2, 2, 2, 2, 1 in turn and base's take 10 ms per token there, so every replicate is 1.8
    assert spec["speedup_interval"] == [pytest.approx(1.8), pytest.approx(1.8)]


def test_the_floors_come_from_the_config(tmp_path):
    root = issue_case(tmp_path / "t")
    config = tmp_path / "gates.toml"
    config.write_text("[evidence]\nmin_baseline_steps = 1\n")
    spec = spec_entry(report_json(root, "--config", str(config)))
    # one step is enough now: the 90 ms t0 counts, as it did before the guard
    assert spec["speedup"] == pytest.approx(6.3)
    assert spec["speedup_coverage"] == pytest.approx(1.0) and spec["uncovered_buckets"] == []
    config.write_text("[evidence]\nmin_baseline_requests = 13\n")
    spec = spec_entry(report_json(root, "--config", str(config)))
    # base's batch-1 t0 rests on 12 requests: below 13, every bucket is left out
    assert spec["speedup"] is None
    assert [(b["batch_bucket"], b["reason"], b["baseline_steps"], b["baseline_requests"])
            for b in spec["uncovered_buckets"]] == [("1", "few_baseline_requests", 1200, 12),
                                                    ("65-128", "few_baseline_steps", 1, 100)]


def test_25_steps_of_a_single_request_fail_the_request_floor(tmp_path):
    b = Builder()
    for _ in range(25):
        b.step("base", 10.0, [("only", 0, 1)])
    for i in range(30):
        b.step("spec", 10.0, [(f"s{i % 10}", 4, 2)])
    doc = report_json(b.write(tmp_path, [deployment("spec"), deployment("base", "none")]))
    spec = spec_entry(doc)
    assert spec["speedup"] is None and spec["speedup_coverage"] == 0
    assert spec["uncovered_buckets"] == [{"batch_bucket": "1", "committed_share": 1.0,
                                          "reason": "few_baseline_requests", "baseline_steps": 25,
                                          "baseline_requests": 1}]
    assert ("spec: no speedup: no decode-only batch bucket of this deployment has a usable t0 of base "
            "(one it ran with at least 20 decode steps and 10 requests)") in doc["notes"]
    assert ("spec: batch 1 left out of the speedup: base's t0 there rests on 25 steps and 1 request "
            "(20 steps and 10 requests needed); 100.0% of spec's committed tokens ran there") in doc["notes"]


def test_steps_and_requests_per_bucket_are_counted_exactly(tmp_path):
    """Requests that visit several buckets count once in each, steps count in every context
    bucket they have rounds in, and prefill steps count nowhere."""
    b = Builder()
    # batch 2: a and b together, at 500 and 1500 tokens of context: one step, two context buckets
    b.step("d", 10.0, [("a", 0, 1), ("b", 0, 1)])
    b.steps[-1]["batch_size"] = 2
    b.rounds[-2]["context_len"], b.rounds[-1]["context_len"] = 500, 1500
    # batch 1: a alone, twice at 600 tokens, then once without a context
    b.step("d", 10.0, [("a", 0, 1)], context_len=600).step("d", 10.0, [("a", 0, 1)], context_len=600)
    b.step("d", 10.0, [("a", 0, 1)])
    # a prefill step at batch 1 for c: no decode step, c is in no bucket
    b.step("d", 30.0, [("c", 0, 1)], prefill=50, context_len=600)
    # batch 100 (65-128): a and 99 others at 3000 tokens, so cell 65-128 × 2k-4k is bit 7·7 + 2 = 51
    # of the low mask, and batch 513+ at 40000 tokens is cell 10·7 + 6 = 76, bit 13 of the high mask
    b.step("d", 10.0, [("a", 0, 1)] + [(f"x{j}", 0, 1) for j in range(99)], context_len=3000)
    b.step("d", 10.0, [("a", 0, 1), ("e", 0, 1)], batch_size=600, context_len=40000)
    ws = api.open_traces(b.write(tmp_path, [deployment("d", "none")]))
    try:
        got = ws.con.execute("select batch_bucket, context_bucket, num_steps, num_requests from bucket_evidence "
                             "order by batch_bucket_min(batch_bucket), context_bucket_min(context_bucket) nulls first"
                             ).fetchall()
        masks = dict(ws.con.execute("select request_id, [decode_batch_mask, decode_cell_mask_low, "
                                    "decode_cell_mask_high] from request_rounds").fetchall())
    finally:
        ws.close()
    assert got == [("1", None, 3, 1), ("1", "0-1k", 2, 1),
                   ("2", None, 1, 2), ("2", "0-1k", 1, 1), ("2", "1k-2k", 1, 1),
                   ("65-128", None, 1, 100), ("65-128", "2k-4k", 1, 100),
                   ("513+", None, 1, 2), ("513+", "32k+", 1, 2)]
    # a: batch positions 1, 2, 8, 11 → bits 0, 1, 7, 10; cells (1, 0-1k) = 0, (2, 0-1k) = 7,
    # (65-128, 2k-4k) = 51, and (513+, 32k+) = 76 − 63 = bit 13 of the high mask
    assert masks["a"] == [1 + 2 + 2 ** 7 + 2 ** 10, 1 + 2 ** 7 + 2 ** 51, 2 ** 13]
    assert masks["b"] == [2, 2 ** 8, 0]      # (2, 1k-2k) = 1 · 7 + 1
    assert masks["c"] == [0, 0, 0]           # prefill only


# --------------------------------------------------------------------------- the recommendation's guards


def recommend_json(root, *args) -> dict:
    result = CliRunner().invoke(main, ["recommend", str(root), "--deployment", "spec", "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_context_cell_of_few_rounds_takes_the_overall_k(tmp_path):
    """test_recommend_context's two contexts with 120 and 60 decode rounds (two_contexts(2, 1)):
    alone, 0-1k would want k = 4 and 8k-16k k = 1, against the overall 2 (test_recommend_context
    works these out). Below min_context_cell_rounds = 200 both take 2 and differ nowhere."""
    from test_recommend_context import two_contexts

    root = two_contexts(2, 1).write(tmp_path / "t")
    doc = recommend_json(root, "--by-context")
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 1, 2]]
    short, long_ = doc["by_context"]
    for entry, rounds in ((short, 120), (long_, 60)):
        (cell,) = entry["buckets"]
        assert (cell["recommended"], cell["takes_overall_k"], entry["differs_from_overall"]) == (2, True, [])
        assert entry["ranges"] == [[1, 1, 2]]
        assert cell["why"] == f"{rounds} decode rounds here, fewer than min_context_cell_rounds = 200: the overall k (2)"
        assert (f"Fewer than 200 decode rounds (min_context_cell_rounds) at context {entry['context_bucket']} in "
                f"batch 1 ({rounds} rounds): too few to differ from the overall recommendation, so these take its "
                "k.") in entry["notes"]
    config = tmp_path / "gates.toml"
    config.write_text("[evidence]\nmin_context_cell_rounds = 60\n")
    short, long_ = recommend_json(root, "--by-context", "--config", str(config))["by_context"]
    assert [(e["context_bucket"], e["buckets"][0]["recommended"], e["differs_from_overall"]) for e in (short, long_)] == [
        ("0-1k", 4, [{"batch_bucket": "1", "k": 4, "overall_k": 2, "num_rounds": 120}]),
        ("8k-16k", 1, [{"batch_bucket": "1", "k": 1, "overall_k": 2, "num_rounds": 60}])]


def low_r2_case(root):
    """spec (γ up to 3) at batch 1, every draft accepted (E[L](γ) = 1 + γ): four steps at γ = 1
    taking 10, 14, 10, 14 ms and four at γ = 3 taking 11, 15, 11, 15 ms; base decodes at 10 ms
    per token (test_tuning's Traces: 20 steps over 10 requests).

    The fit T = α + β·X (X = γ + 1; batch size never varies): the means 12 ms at X = 2 and
    13 ms at X = 4 give β = 0.5, α = 11. SSE = 8 · 2² = 32 about the two means, SST = 32 +
    8 · 0.5² = 34, R² = 2 / 34 = 0.0588. Measured: γ = 1 10 · 2 / 12 = 1.667, γ = 3 10 · 4 / 13 =
    3.077; γ = 2 never ran, and the fit would say 10 · 3 / (11 + 0.5 · 3) = 2.4."""
    from test_tuning import Traces

    t = Traces().deployment("spec", gamma=3).deployment("base", "none")
    for ms in (10, 14, 10, 14):
        t.step("spec", [(1, 1)], ms)
    for ms in (11, 15, 11, 15):
        t.step("spec", [(3, 3)], ms)
    return t.baseline("base", 1, 10.0).write(root)


def test_a_cost_fit_below_min_fit_r2_predicts_no_length_that_never_ran(tmp_path):
    root = low_r2_case(tmp_path / "t")
    doc = recommend_json(root)
    (fit,) = doc["cost_fits"]
    assert fit["r2"] == pytest.approx(2 / 34) and fit["extrapolates"] is False and fit["min_r2"] == 0.5
    (b,) = doc["buckets"]
    assert b["predicted_speedup"] == {"0": 1.0, "1": pytest.approx(20 / 12), "2": None, "3": pytest.approx(40 / 13)}
    assert b["round_ms_source"] == {"1": "measured", "2": None, "3": "measured"}
    assert b["recommended"] == 3 and b["fit_r2"] is None
    assert b["why"] == ("largest predicted speedup (γ = 0–3); the cost fit's R² 0.059 is below min_fit_r2 = 0.5, "
                        "so it predicts no γ that never ran: measured round times only (no prediction for γ = 2)")
    config = tmp_path / "gates.toml"
    config.write_text("[evidence]\nmin_fit_r2 = 0.05\n")
    (b,) = recommend_json(root, "--config", str(config))["buckets"]
    assert b["predicted_speedup"]["2"] == pytest.approx(30 / 12.5) and b["round_ms_source"]["2"] == "fit"
    assert b["fit_r2"] == pytest.approx(2 / 34)
    assert b["why"] == "largest predicted speedup (γ = 0–3); γ = 2 from the round-cost fit"


def test_the_report_prints_one_config_per_deployment(sample_report):
    section = sample_report["md"].split("## 13. Speculation length\n", 1)[1].split("\n## ", 1)[0]
    per_deployment = section.split("\n### ")[1:]
    assert len(per_deployment) == 4
    for part in per_deployment:
        dep = part.split("\n", 1)[0]
        (rec,) = [r for r in sample_report["doc"]["tuning"]["recommendations"] if r["deployment_id"] == dep]
        lines = [line for line in part.splitlines() if '"num_speculative_tokens_per_batch_size"' in line]
        assert lines == [f'vLLM config: `"num_speculative_tokens_per_batch_size": '
                         f'{rec["num_speculative_tokens_per_batch_size"]}`']
        assert "what this context would want" in part and "dominant context" not in part


def test_a_context_cell_below_the_floors_takes_the_batch_t0(tmp_path):
    """base at batch 1: 20 steps of 10 ms over 10 requests at 500 tokens of context, and 20
    steps of 20 ms of a single request at 3000: t0(1, 0-1k) = 10 ms, t0(1, 2k-4k) = 20 ms on
    1 request, t0(1) = (200 + 400) / 40 = 15 ms (11 requests). spec: 10 rounds of 10 ms, 2
    tokens each, in each context."""
    b = Builder()
    for i in range(20):
        b.step("base", 10.0, [(f"b{i % 10}", 0, 1)], context_len=500)
    for _ in range(20):
        b.step("base", 20.0, [("long", 0, 1)], context_len=3000)
    for i in range(10):
        b.step("spec", 10.0, [(f"s{i}", 4, 2)], context_len=500)
        b.step("spec", 10.0, [(f"t{i}", 4, 2)], context_len=3000)
    root = b.write(tmp_path, [deployment("spec"), deployment("base", "none")])
    ws = api.open_traces(root)
    try:
        query = ("select context_bucket, t0_ms, t0_match, context_t0_guard, context_baseline_steps, "
                 "context_baseline_requests, speedup from speedup_by_batch_context where deployment_id = 'spec' "
                 "order by context_min")
        got = ws.con.execute(query).fetchall()
        lift_floors(ws.con)
        lifted = ws.con.execute(query).fetchall()
    finally:
        ws.close()
    # 2k-4k: the single request's 20 ms does not count; the batch bucket's 15 ms does: 15 · 20 / 100
    assert got == [("0-1k", pytest.approx(10.0), "context", None, 20, 10, pytest.approx(2.0)),
                   ("2k-4k", pytest.approx(15.0), "batch", "few_baseline_requests", 20, 1, pytest.approx(3.0))]
    assert lifted[1] == ("2k-4k", pytest.approx(20.0), "context", None, 20, 1, pytest.approx(4.0))


def test_sql_reads_the_default_floors_and_recommend_refuses_a_bad_config(tmp_path):
    root = issue_case(tmp_path / "t")
    result = CliRunner().invoke(main, ["sql", str(root), "--format", "csv",
                                       "select min_baseline_steps() as s, min_baseline_requests() as r, "
                                       "min_context_cell_rounds() as c, min_fit_r2() as f, "
                                       "intervals_replicates() as n, intervals_seed() as seed"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["s,r,c,f,n,seed", "20,10,200,0.5,16000,0"]
    bad = tmp_path / "bad.toml"
    bad.write_text("[evidence]\nmin_fit_r2 = 2\n")
    result = CliRunner().invoke(main, ["recommend", str(root), "--deployment", "spec", "--config", str(bad)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].endswith(
        f"{bad}: evidence.min_fit_r2: expected a number between 0 and 1, found 2")
