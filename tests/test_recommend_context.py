"""`specan recommend --by-context` and analyzer.tuning.recommend_by_context.

The fixture is the seed's section 8.1 setup (test_tuning) run at two context
lengths. Conditional acceptance is exactly 0.8 at every position in both, so
E[L](γ) is the closed form (1 − 0.8^(γ+1)) / 0.2 in each context bucket. Every
γ from 1 to 8 ran at batch size 1, one round per step:

- short prompts (context_len 500, bucket 0-1k), eight copies of the block (480
  steps): the seed's cheap costs, and the baseline decodes at 10 ms per token.
  Predicted speedup 10 · E[L](γ) / cheap(γ): γ = 4 wins with 2.334.
- long prompts (context_len 10000, bucket 8k-16k), four copies (240 steps): the
  seed's costly costs, and the baseline decodes at 12 ms per token. Predicted
  12 · E[L](γ) / costly(γ): γ = 1 gives 12 · 1.8 / 15.8 = 1.367, and γ = 4 loses,
  12 · 3.3616 / 42.8 = 0.943 < 1.

Both cells have at least min_context_cell_rounds (200) decode rounds, so each may differ
from the overall answer; two_contexts(2, 1) has 120 and 60, too few.

The baseline ran 40 steps short and 20 long, all at batch 1: one load cell, whose time per
token on context has the slope κ = (12 − 10) / (10,000 − 500) ms per token of context (two
contexts: the slope between their means), so t0 at a step's own context X is
10 + κ · (X − 500): 10 ms at 500 and 12 ms at 10,000. Its step times rise by 0.01 ms a step
about those means (tracebuilder.trend_ms), so the speedup's jackknife has blocks that differ.

Pooled over both contexts (the overall recommendation), a round at γ costs the
round-weighted mean (2 · cheap + costly) / 3, and t0 is the counterfactual time per token of
the deployment's own steps: 2/3 of its tokens short (8 blocks of 232), 1/3 long (4 blocks),
(2 · 10 + 12) / 3 = 10.667 ms: γ = 2 wins there. As it ran it measured
(8 · 232 · 10 + 4 · 232 · 12) / (8 · 860 + 4 · 2551) = 29,696 / 17,084 = 1.738 (test_recommend
works out 232, 860 and 2551), above 1 by its interval: the overall config is γ = 2.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.analysis.tuning import MIN_CONTEXT_FIT_STEPS
from analyzer.cli import main
from test_recommend import plain, take_turns
from test_tuning import Traces, cheap, closed_form_length, costly, pooled_block

SHORT, LONG = 500, 10_000


class ContextTraces(Traces):
    """Traces whose rounds carry the context_len set by ``at_context``."""

    def __init__(self):
        super().__init__()
        self.rounds["context_len"] = []
        self.context = None

    def at_context(self, context_len):
        self.context = context_len
        return self

    def step(self, *args, **kwargs):
        before = len(self.rounds["deployment_id"])
        super().step(*args, **kwargs)
        self.rounds["context_len"] += [self.context] * (len(self.rounds["deployment_id"]) - before)
        return self


def two_contexts(short_blocks=8, long_blocks=4) -> ContextTraces:
    t = ContextTraces().deployment("spec").deployment("base", "none")
    take_turns(t.at_context(SHORT).regime("spec", pooled_block() * short_blocks, 1, cheap), "base",
               plain(1, 10.0, steps=40))
    take_turns(t.at_context(LONG).regime("spec", pooled_block() * long_blocks, 1, costly), "base",
               plain(1, 12.0, steps=20))
    return t


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    ws = api.open_traces(two_contexts().write(tmp_path_factory.mktemp("contexts")))
    try:
        return api.recommend(ws, "spec", by_context=True)
    finally:
        ws.close()


def by_context(doc, bucket):
    (entry,) = [e for e in doc["by_context"] if e["context_bucket"] == bucket]
    return entry


def test_short_contexts_keep_gamma_4_and_long_ones_make_it_lose(doc):
    short, long_ = by_context(doc, "0-1k"), by_context(doc, "8k-16k")
    (s,), (l_,) = short["buckets"], long_["buckets"]
    for g in range(1, 9):
        assert s["predicted_speedup"][str(g)] == pytest.approx(10 * closed_form_length(g) / cheap(g), rel=1e-12)
        assert l_["predicted_speedup"][str(g)] == pytest.approx(12 * closed_form_length(g) / costly(g), rel=1e-12)
        assert s["round_ms_source"][str(g)] == l_["round_ms_source"][str(g)] == "measured"
    assert round(s["predicted_speedup"]["4"], 3) == 2.334
    assert round(l_["predicted_speedup"]["1"], 3) == 1.367
    assert round(l_["predicted_speedup"]["4"], 3) == 0.943
    assert (s["recommended"], l_["recommended"]) == (4, 1)
    assert (s["cost_fit"], l_["cost_fit"]) == ("context", "context")
    assert (s["t0_match"], l_["t0_match"]) == ("context", "context")
    assert s["baseline_ms_per_token"] == pytest.approx(10.0)
    assert l_["baseline_ms_per_token"] == pytest.approx(12.0)
    assert short["ranges"] == [[1, 1, 4]]
    assert long_["ranges"] == [[1, 1, 1]]


def test_the_overall_answer_pools_both_and_each_context_says_how_it_differs(doc):
    (overall,) = doc["buckets"]
    t0 = (2 * 10 + 12) / 3   # the counterfactual at the deployment's own contexts (module docstring)
    for g in range(1, 9):
        pooled_ms = (2 * cheap(g) + costly(g)) / 3
        assert overall["predicted_speedup"][str(g)] == pytest.approx(t0 * closed_form_length(g) / pooled_ms,
                                                                     rel=1e-12)
    assert overall["baseline_ms_per_token"] == pytest.approx(t0)
    assert overall["predicted_best"] == 2
    # as it ran: 29,696 / 17,084 = 1.738, above 1 by its interval: the bucket pays, k = 2
    assert overall["measured_speedup"] == pytest.approx(29_696 / 17_084)
    assert overall["measured_speedup_interval"][0] > 1
    assert (overall["evidence"], overall["recommended"]) == ("pays", 2)
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 1, 2]]
    assert by_context(doc, "0-1k")["differs_from_overall"] == [{"batch_bucket": "1", "k": 4, "overall_k": 2,
                                                                        "num_rounds": 480}]
    assert by_context(doc, "8k-16k")["differs_from_overall"] == [{"batch_bucket": "1", "k": 1, "overall_k": 2,
                                                                          "num_rounds": 240}]


def test_the_dominant_context_is_the_one_with_most_decode_rounds(doc):
    short, long_ = by_context(doc, "0-1k"), by_context(doc, "8k-16k")
    assert (short["num_rounds"], long_["num_rounds"]) == (480, 240)
    assert short["share_of_rounds"] == pytest.approx(2 / 3)
    assert (short["dominant"], long_["dominant"]) == (True, False)
    assert [e["context_bucket"] for e in doc["by_context"]] == ["0-1k", "8k-16k"]


def test_a_context_with_too_few_steps_borrows_the_batch_fit_and_its_t0_comes_from_the_context_slope(tmp_path):
    """A third context (2k-4k) with 5 steps at γ = 1 and no baseline rounds there: its cost
    comes from the batch bucket's fit over every context. Its t0 no longer falls back to the
    batch bucket's (the old rule, with the note "the baseline has no rounds at context 2k-4k"):
    3000 tokens lie within the baseline's contexts at batch 1 (500 to 10,000, widened by 25 %),
    so the cell's t0 is the load cell's at its own context,
        t0 = 10 + (12 − 10) · (3000 − 500) / (10,000 − 500) = 200 / 19 = 10.526 ms.
    Every position at 2k-4k was accepted (1 of 1): a_1 = 1, E[L](1) = 2, and a_2 … are unknown.
    T_round(1) is the measured mean round time at γ = 1 over every context: 8 · 15 rounds of
    cheap(1) = 10.8, 4 · 15 of costly(1) = 15.8 and these 5 of 10.8, (1296 + 948 + 54) / 185 =
    2298 / 185 ms, so speedup(1) = (200 / 19) · 2 / (2298 / 185) = 1.695."""
    t = two_contexts()
    t.at_context(3000).regime("spec", [(1, 1)] * 5, 1, cheap)
    ws = api.open_traces(t.write(tmp_path))
    try:
        doc = api.recommend(ws, "spec", by_context=True)
    finally:
        ws.close()
    entry = by_context(doc, "2k-4k")
    (b,) = entry["buckets"]
    assert (b["cost_fit"], b["t0_match"]) == ("batch", "context")
    assert b["baseline_ms_per_token"] == pytest.approx(200 / 19)
    assert any(f"Fewer than {MIN_CONTEXT_FIT_STEPS} decode steps at context 2k-4k in batch 1 (5 steps)" in n
               for n in entry["notes"])
    assert not any("has no rounds at context" in n for n in entry["notes"])
    assert b["predicted_speedup"]["1"] == pytest.approx((200 / 19) * 2 / (2298 / 185))
    assert b["predicted_speedup"]["2"] is None


def test_cli_by_context_json_and_markdown(tmp_path):
    root = two_contexts().write(tmp_path / "traces")
    runner = CliRunner()
    plain = runner.invoke(main, ["recommend", str(root), "--deployment", "spec", "--format", "json"])
    assert plain.exit_code == 0, plain.output
    assert "by_context" not in json.loads(plain.output)
    result = runner.invoke(main, ["recommend", str(root), "--deployment", "spec", "--by-context",
                                  "--format", "json"])
    assert result.exit_code == 0, result.output
    entries = json.loads(result.output)["by_context"]
    assert [(e["context_bucket"], e["ranges"]) for e in entries] == [("0-1k", [[1, 1, 4]]), ("8k-16k", [[1, 1, 1]])]
    md = runner.invoke(main, ["recommend", str(root), "--deployment", "spec", "--by-context"])
    assert md.exit_code == 0, md.output
    assert ("| context | decode rounds | what this context would want | differs from overall |\n"
            "|---|---|---|---|\n"
            "| 0-1k | 66.7% | [[1, 1, 4]] | batch 1: k = 4 (overall 2; 480 rounds) |\n"
            "| 8k-16k | 33.3% | [[1, 1, 1]] | batch 1: k = 1 (overall 2; 240 rounds) |\n") in md.output
    # one config to copy, the overall one: a context's ranges are never a second block
    assert md.output.count("```") == 2
    assert '```\n"num_speculative_tokens_per_batch_size": [[1, 1, 2]]\n```\n' in md.output
    assert "dominant context" not in md.output
