"""The sample-size guards of the [evidence] section: the baseline's time per token in a load
cell rests on enough decode steps and distinct requests (matched_support), and a load is
matched only between or within such cells (matched_weights, speedup_uncovered).

Every count and ratio below is worked out by hand from the traces each test builds.
A round's time is its step's duration (every request in a step waits for it), so
t0(cell) = Σ round time / Σ committed = the step time per token of one request.
Load cells: batch sizes 1 to 16 are their own cell; above, each batch bucket is cut into
8 equal cells named by their least size (17, 19, …; 65, 73, …, 97 holds 97-104; 513, 577, …).
"""

from __future__ import annotations

import json
import tomllib

import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.analysis.config import parse_config
from analyzer.analysis.views import set_config_thresholds
from analyzer.cli import main
from tracebuilder import deployment, round_row, step, trend_ms, write_traces


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
    """The issue's case. base: 1,200 rounds at batch 1, 12 requests of 100 rounds, in steps
    of trend_ms(10, 1200, 0.001) (9.4005 to 10.5995 ms, 12,000 ms in all): t0(1) = 10 ms
    exactly. Then a single 90 ms step at batch 100, one round of each of 100 other requests:
    t0 in cell 97 = 100 · 90 / 100 = 90 ms, resting on 1 step.

    spec: 400 rounds at batch 1 (10 requests of 40), 10 ms steps, each request's rounds
    committing 2, 2, 2, 2, 1 in turn (mean 1.8): speedup(1) = 10 · 720 / 4000 = 1.8. Then 8 steps of 25 ms at batch
    100, each one round of 100 requests committing 2: 1,600 tokens in 8 · 100 · 25 =
    20,000 ms. With the one-step t0 the speedup would be (10 · 720 + 90 · 1600) /
    (4000 + 20000) = 151,200 / 24,000 = 6.3."""
    b = Builder()
    for i, ms in enumerate(trend_ms(10.0, 1200, 0.001)):
        b.step("base", ms, [(f"b{i % 12}", 0, 1)])
    b.step("base", 90.0, [(f"w{j}", 0, 1) for j in range(100)])
    for i in range(400):
        b.step("spec", 10.0, [(f"s{i % 10}", 4, 1 if i // 10 % 5 == 4 else 2)])
    for _ in range(8):
        b.step("spec", 25.0, [(f"h{j}", 4, 2) for j in range(100)])
    return b.write(root, [deployment("spec"), deployment("base", "none")])


SUPPORT = ("select cell, units, requests, guard, supported from matched_support "
           "where basis = 'steps' order by cell")


def report(root, config_text: str = "", queries: tuple[str, ...] = ()) -> tuple[dict, list[list[tuple]]]:
    """The report document with the gates TOML ``config_text``, and the rows of ``queries``
    on the same workspace (its floors set by that config)."""
    config = parse_config(tomllib.loads(config_text), source="test.toml")
    with api.open_traces(root) as ws:
        doc = api.report_document(ws, config=config)
        return doc, [ws.con.execute(q).fetchall() for q in queries]


def set_floors(con, config_text: str) -> None:
    """The [evidence] floors of ``config_text`` on a workspace's connection, as ``--config`` sets them."""
    set_config_thresholds(con, parse_config(tomllib.loads(config_text), source="test.toml"))


def spec_entry(doc: dict) -> dict:
    return next(d for d in doc["deployments"] if d["deployment_id"] == "spec")


def spec_verdict(doc: dict) -> dict:
    return next(v for v in doc["verdict"] if v["deployment_id"] == "spec")


def test_one_baseline_step_does_not_make_a_1_8x_deployment_6_3x(tmp_path):
    doc, (support,) = report(issue_case(tmp_path), queries=(SUPPORT,))
    # cell 1: 1,200 steps of 12 requests; cell 97 (batch 100): 1 step, below 20 (a step of more
    # than 16 requests holds enough of them itself: no request count)
    assert support == [(1, 1200, 12, None, True), (97, 1, None, "few_baseline_steps", False)]
    spec = spec_entry(doc)
    assert spec["speedup"] == pytest.approx(1.8)
    # covered: the 720 tokens at batch 1 of 720 + 1,600; batch 100 lies above every load the
    # baseline measured enough of (batch 1)
    assert spec["speedup_coverage"] == pytest.approx(720 / 2320)
    assert spec["uncovered_buckets"] == [{"batch_bucket": "65-128", "committed_share": pytest.approx(1600 / 2320),
                                          "reason": "above_baseline_loads", "min_batch_size": 100,
                                          "max_batch_size": 100, "min_context": None, "max_context": None,
                                          "baseline_min_load": 1, "baseline_max_load": 1}]
    assert ("spec: left out of the speedup: batch 100 (69.0% of its tokens): above every load the baseline "
            "measured; base measured batch 1") in doc["notes"]
    # the load curve leaves the bucket's t0 out too: one definition, not one per consumer
    curve = {r["batch_bucket"]: r for r in doc["load_curve"] if r["deployment_id"] == "spec"}
    assert curve["1"]["t0_ms"] == pytest.approx(10.0) and curve["1"]["speedup"] == pytest.approx(1.8)
    assert curve["65-128"]["t0_ms"] is None and curve["65-128"]["speedup"] is None
    assert curve["65-128"]["matched_share"] == 0
    # the interval covers the same steps only: base's 10 ms per token is exact (its trend is
    # symmetric about 10), so the truth is 10 · 720 / 4000 = 1.8, which it holds, above 1
    lo, hi = spec["speedup_interval"]
    assert 1 < lo < 1.8 < hi


def test_the_floors_come_from_the_config(tmp_path):
    root = issue_case(tmp_path / "t")
    doc, (support,) = report(root, "[evidence]\nmin_baseline_steps = 1\n", (SUPPORT,))
    # one step is enough now: cell 97's 90 ms is a point at batch 100, where spec's steps ran
    assert support == [(1, 1200, 12, None, True), (97, 1, None, None, True)]
    spec = spec_entry(doc)
    assert spec["speedup"] == pytest.approx(6.3)
    assert spec["speedup_coverage"] == pytest.approx(1.0) and spec["uncovered_buckets"] == []
    doc, (support,) = report(root, "[evidence]\nmin_baseline_requests = 13\n", (SUPPORT,))
    # base's batch-1 cell rests on 12 requests: below 13, and cell 97 on 1 step: no cell is
    # supported, so no load is matched
    assert support == [(1, 1200, 12, "few_baseline_requests", False), (97, 1, None, "few_baseline_steps", False)]
    spec = spec_entry(doc)
    assert spec["speedup"] is None and spec["speedup_coverage"] == 0
    assert [(b["batch_bucket"], b["committed_share"], b["reason"]) for b in spec["uncovered_buckets"]] == [
        ("1", pytest.approx(720 / 2320), "no_baseline_loads"),
        ("65-128", pytest.approx(1600 / 2320), "no_baseline_loads")]


def single_request_case(root, requests: int):
    """base: 25 steps of 10 ms at batch 1 taking turns among ``requests`` requests; spec: 30
    steps of 10 ms at batch 1 over 10 requests, each round committing 2: at t0 = 10 ms,
    speedup 10 · 2 / 10 = 2.0 where base is supported."""
    b = Builder()
    for i in range(25):
        b.step("base", 10.0, [(f"b{i % requests}", 0, 1)])
    for i in range(30):
        b.step("spec", 10.0, [(f"s{i % 10}", 4, 2)])
    return b.write(root, [deployment("spec"), deployment("base", "none")])


def test_25_steps_of_a_single_request_fail_the_request_floor(tmp_path):
    doc, (support,) = report(single_request_case(tmp_path / "one", 1), queries=(SUPPORT,))
    assert support == [(1, 25, 1, "few_baseline_requests", False)]
    spec = spec_entry(doc)
    assert spec["speedup"] is None and spec["speedup_coverage"] == 0
    assert spec["uncovered_buckets"] == [{"batch_bucket": "1", "committed_share": 1.0, "reason": "no_baseline_loads",
                                          "min_batch_size": 1, "max_batch_size": 1, "min_context": None,
                                          "max_context": None, "baseline_min_load": None,
                                          "baseline_max_load": None}]
    assert ("spec: left out of the speedup: batch 1 (100.0% of its tokens): the baseline measured no load with "
            "enough steps and requests ([evidence] floors)") in doc["notes"]
    assert ("spec: no speedup: none of its decode steps ran at a load (and context) that base measured (a load "
            "cell with at least 20 decode steps and 10 requests, or between two such cells)") in doc["notes"]
    # the verdict names the floor, not a load mismatch: both ran at batch 1, and base's
    # unsupported cell is no load it measured (matched_speedup's baseline loads)
    verdict = spec_verdict(doc)
    assert (verdict["action"], verdict["text"]) == ("unknown", (
        "No verdict for spec: its speedup is unknown (no speedup: none of its decode steps ran at a load (and "
        "context) that base measured (a load cell with at least 20 decode steps and 10 requests, or between two "
        "such cells)); steps of base at the batch sizes spec ran (enough steps and requests at each load) would "
        "decide it."))
    assert spec_entry(doc)["matched"]["rounds"]["baseline_loads"] is None
    # the same 25 steps over 10 requests clear both floors: speedup 2.0
    doc, (support,) = report(single_request_case(tmp_path / "ten", 10), queries=(SUPPORT,))
    assert support == [(1, 25, 10, None, True)]
    assert spec_entry(doc)["speedup"] == pytest.approx(2.0)
    assert spec_entry(doc)["uncovered_buckets"] == []


def test_steps_and_requests_per_load_cell_are_counted_exactly(tmp_path):
    """Steps count in the load cell of their batch size; distinct requests are counted exactly
    in cells up to 16 (a request that visits several counts once in each), a step of more than
    16 requests holds enough of them itself; prefill steps count nowhere."""
    b = Builder()
    # batch 2: a and b together, at 500 and 1500 tokens of context: one step of cell 2
    b.step("d", 10.0, [("a", 0, 1), ("b", 0, 1)])
    b.rounds[-2]["context_len"], b.rounds[-1]["context_len"] = 500, 1500
    # batch 1: a alone, twice at 600 tokens, then once without a context
    b.step("d", 10.0, [("a", 0, 1)], context_len=600).step("d", 10.0, [("a", 0, 1)], context_len=600)
    b.step("d", 10.0, [("a", 0, 1)])
    # a prefill step at batch 1 for c: no decode step, c is in no cell
    b.step("d", 30.0, [("c", 0, 1)], prefill=50, context_len=600)
    # batch 16, a and 15 others: cell 16, 16 requests; 18 and 20: cells 17 and 17 + 2 · 1 = 19
    b.step("d", 10.0, [("a", 0, 1)] + [(f"y{j}", 0, 1) for j in range(15)])
    b.step("d", 10.0, [(f"z{j}", 0, 1) for j in range(18)])
    b.step("d", 10.0, [(f"z{j}", 0, 1) for j in range(20)])
    # batch 100 (cell 65 + 8 · 4 = 97) and 600 (cell 513 + 64 · 1 = 577)
    b.step("d", 10.0, [("a", 0, 1)] + [(f"x{j}", 0, 1) for j in range(99)], context_len=3000)
    b.step("d", 10.0, [("a", 0, 1), ("e", 0, 1)], batch_size=600, context_len=40000)
    with api.open_traces(b.write(tmp_path, [deployment("d", "none")])) as ws:
        got = ws.con.execute(SUPPORT).fetchall()
        contexts = ws.con.execute("select cell, min_context, max_context from matched_support "
                                  "where cell <= 2 order by cell").fetchall()
        masks = dict(ws.con.execute("select request_id, decode_size_mask from request_rounds").fetchall())
        set_floors(ws.con, "[evidence]\nmin_baseline_steps = 1\nmin_baseline_requests = 2\n")
        floored = ws.con.execute(SUPPORT).fetchall()
    assert got == [(1, 3, 1, "few_baseline_steps_and_requests", False),
                   (2, 1, 2, "few_baseline_steps_and_requests", False),
                   (16, 1, 16, "few_baseline_steps", False),
                   (17, 1, None, "few_baseline_steps", False), (19, 1, None, "few_baseline_steps", False),
                   (97, 1, None, "few_baseline_steps", False), (577, 1, None, "few_baseline_steps", False)]
    # context per request: the step at batch 2 held (500 + 1500) / 2; the one without a context is none
    assert contexts == [(1, 600.0, 600.0), (2, 1000.0, 1000.0)]
    # at one step and two requests, only cell 1 (a alone) falls short, of requests
    assert floored == [(1, 3, 1, "few_baseline_requests", False), (2, 1, 2, None, True), (16, 1, 16, None, True),
                       (17, 1, None, None, True), (19, 1, None, None, True), (97, 1, None, None, True),
                       (577, 1, None, None, True)]
    # bit b − 1 per decode batch size b ≤ 16: a ran at 1, 2 and 16; b at 2; y0 at 16
    assert masks["a"] == 1 + 2 + 2 ** 15
    assert (masks["b"], masks["y0"]) == (2, 2 ** 15)
    assert (masks["c"], masks["x0"], masks["e"], masks["z0"]) == (0, 0, 0, 0)   # prefill only, or above 16


# --------------------------------------------------------------------------- the recommendation's guards


def recommend_json(root, *args) -> dict:
    result = CliRunner().invoke(main, ["recommend", str(root), "--deployment", "spec", "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_context_cell_of_few_rounds_takes_the_overall_k(tmp_path):
    """test_recommend_context's two contexts with 120 and 60 decode rounds (two_contexts(2, 1)):
    alone, 0-1k would want k = 4 and 8k-16k k = 1, against the overall 2 (test_recommend_context
    works these out). Below min_context_cell_rounds = 200 both take 2 and differ nowhere. The
    overall 2 is the config: the bucket pays as it ran (measured 1.738, above 1 by its interval)."""
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
    assert b["predicted_best"] == 3 and b["fit_r2"] is None
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
        lines = [line for line in part.splitlines() if line.startswith("vLLM config: ")]
        if rec["method"] == "ngram":
            # vLLM documents the per-batch option for EAGLE, EAGLE-3 and DFlash only: the one
            # config is the single length, and the ranges are named as that option
            assert lines == [f'vLLM config: `"num_speculative_tokens": 4`, as configured. The lengths per batch '
                             f'size below, `"num_speculative_tokens_per_batch_size": '
                             f'{rec["num_speculative_tokens_per_batch_size"]}`, use an option vLLM 0.32.0 documents '
                             f'as tested with EAGLE, EAGLE-3 and DFlash only; {dep} uses method ngram.']
        else:
            assert lines == [f'vLLM config: `"num_speculative_tokens_per_batch_size": '
                             f'{rec["num_speculative_tokens_per_batch_size"]}`']
        assert "what this context would want" in part and "dominant context" not in part


def test_a_step_is_matched_at_its_own_context_and_not_beyond_the_baselines(tmp_path):
    """base at batch 1: 20 steps of 10 ms over 10 requests at 500 tokens of context, and 20
    steps of 20 ms of a single request at 3000. The floors are the load cell's (the old rule
    guarded each context cell, and left the single request's 20 ms out): cell 1 holds 40 steps
    of 11 requests, so it is supported, and its time per token on context has the slope
    κ = (20 − 10) / (3000 − 500) = 0.004 ms per token: t0(X) = 10 + 0.004 · (X − 500).

    spec: 10 steps of 10 ms at batch 1, one round committing 2, at each of 500, 1500 and 3700
    tokens: t0 = 10, 14 and 22.8 ms, speedups 2.0, 2.8 and 4.56 (3700 lies beyond the
    baseline's most, 3000, but within 25 %: 3750); and 10 at 5000, beyond 3750:
    context_out_of_range, left out. Headline: 20 · (10 + 14 + 22.8) / (30 · 10) = 3.12 on
    60 of 80 tokens."""
    b = Builder()
    for i in range(20):
        b.step("base", 10.0, [(f"b{i % 10}", 0, 1)], context_len=500)
    for _ in range(20):
        b.step("base", 20.0, [("long", 0, 1)], context_len=3000)
    for i in range(10):
        for context in (500, 1500, 3700, 5000):
            b.step("spec", 10.0, [(f"s{context}-{i}", 4, 2)], context_len=context)
    query = ("select context_bucket, t0_ms, t0_match, context_t0_guard, matched_share, speedup "
             "from speedup_by_batch_context where deployment_id = 'spec' order by context_min")
    doc, (support, got, weights) = report(
        b.write(tmp_path, [deployment("spec"), deployment("base", "none")]),
        queries=(SUPPORT, query, "select kappa, context_lo, context_hi from matched_weights where basis = 'steps'"))
    assert support == [(1, 40, 11, None, True)]
    assert weights == [(pytest.approx(0.004), pytest.approx(500 / 1.25), pytest.approx(3000 * 1.25))]
    assert got == [("0-1k", pytest.approx(10.0), "context", None, 1.0, pytest.approx(2.0)),
                   ("1k-2k", pytest.approx(14.0), "context", None, 1.0, pytest.approx(2.8)),
                   ("2k-4k", pytest.approx(22.8), "context", None, 1.0, pytest.approx(4.56)),
                   ("4k-8k", None, None, "context_out_of_range", 0.0, None)]
    spec = spec_entry(doc)
    assert spec["speedup"] == pytest.approx(20 * (10 + 14 + 22.8) / 300)
    assert spec["speedup_coverage"] == pytest.approx(60 / 80)
    assert spec["matched"]["rounds"]["context_known"] is True
    assert spec["uncovered_buckets"] == [{"batch_bucket": "1", "committed_share": pytest.approx(0.25),
                                          "reason": "context_out_of_range", "min_batch_size": 1,
                                          "max_batch_size": 1, "min_context": 5000.0, "max_context": 5000.0,
                                          "baseline_min_load": 1, "baseline_max_load": 1}]


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
