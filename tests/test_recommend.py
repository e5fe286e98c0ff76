"""analyzer.tuning.recommend and `specan recommend` (docs/commands.md, section `specan recommend`).

The traces are the seed's section 8.1 setup, built in test_tuning (see its
docstring): conditional acceptance exactly 0.8 at every position, pooled over all
rounds; γ varies per step from 1 to 8 at batch size 1; plain decoding costs 10 ms
per token. Expected speedups are t0 · E[L](γ) / cost(γ) worked out by hand:

    γ         1      2      3      4      5      8
    E[L]      1.8    2.44   2.952  3.3616 3.6893 4.3289
    cheap     10.8   12.8   13.0   14.4   16.0   22.0    -> 1.667 2.068 2.271 2.334 2.306 1.968
    costly    15.8   23.2   34.2   42.8   55.0   101.2   -> 1.139 1.052 0.863 0.785 0.671 0.428
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from analyzer import api
from analyzer.analysis.config import parse_config
from analyzer.cli import main
from analyzer.analysis.tuning import UnknownDeployment, recommend
from analyzer.render.recommend import render_recommend_markdown
from test_tuning import Traces, cheap, closed_form_length, costly, fixed_gamma_block, pooled_block, sweep


def recommend_for(root, deployment_id="spec"):
    ws = api.open_traces(root)
    try:
        return recommend(ws.con, deployment_id)
    finally:
        ws.close()


def only_bucket(doc, bucket="1"):
    (b,) = [b for b in doc["buckets"] if b["batch_bucket"] == bucket]
    return b


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
    assert b["recommended"] == 4
    assert b["observed_gamma"] == list(range(1, 9))
    assert b["baseline_ms_per_token"] == pytest.approx(10.0)
    # every γ was measured, so the fit serves none and its R² is not shown with the prediction
    assert b["fit_used"] is False and b["fit_r2"] is None
    assert doc["cost_fits"][0]["r2"] == pytest.approx(1.0, abs=1e-12)
    assert b["speedup_at_k"] == pytest.approx(10 * closed_form_length(4) / cheap(4), rel=1e-12)
    assert b["speedup_at_k_source"] == "predicted"
    assert b["why"] == "largest predicted speedup (γ = 0–8)"
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 1, 4]]
    assert doc["baseline_id"] == "base"
    assert not any("Dynamic SD" in n for n in doc["notes"])  # eagle is a tested method


def test_costly_drafts_recommend_gamma_1(tmp_path):
    doc = recommend_for(sweep(tmp_path, costly))
    b = only_bucket(doc)
    assert round(b["predicted_speedup"]["1"], 3) == 1.139
    assert round(b["predicted_speedup"]["2"], 3) == 1.052
    assert round(b["predicted_speedup"]["4"], 3) == 0.785
    assert b["recommended"] == 1
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 1, 1]]


def test_high_batch_regime_recommends_0_and_the_ranges_show_both(two_regimes):
    doc = recommend_for(two_regimes)
    low, high = only_bucket(doc, "1"), only_bucket(doc, "65-128")
    assert low["recommended"] == 4
    assert high["recommended"] == 0
    assert high["baseline_ms_per_token"] == pytest.approx(20.0)
    for g in range(1, 9):
        assert high["predicted_speedup"][str(g)] == pytest.approx(closed_form_length(g) / (1 + g), rel=1e-12)
        assert high["predicted_speedup"][str(g)] < 1
    # Buckets 2 … 33-64 have no data: they take the k of the nearest lower bucket (1), as
    # vLLM treats gaps (docs/commands.md); the ranges end at 65-128's upper bound.
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 64, 4], [65, 128, 0]]
    (note,) = [n for n in doc["notes"] if "nearest lower bucket" in n]
    for bucket in ("2", "3-4", "5-8", "9-16", "17-32", "33-64"):
        assert f"{bucket} (no data; k = 4)" in note


def test_buckets_below_the_lowest_prediction_take_its_k(tmp_path):
    """The baseline ran only at batch size 100: bucket 1 has no t0, so no prediction."""
    t = Traces().deployment("spec").deployment("base", "none")
    t.regime("spec", pooled_block(), 1, cheap)
    t.regime("spec", pooled_block() * 20, 100, lambda g: 20 + 20 * g).baseline("base", 100, 20.0)
    doc = recommend_for(t.write(tmp_path))
    low = only_bucket(doc, "1")
    assert low["recommended"] is None and low["baseline_ms_per_token"] is None
    assert set(low["predicted_speedup"].values()) == {1.0, None}
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 128, 0]]
    assert any("1 (the baseline has no t0 there; k = 0)" in n for n in doc["notes"])


def test_gamma_never_varied_keeps_it_where_it_pays_and_turns_it_off_elsewhere(tmp_path):
    """γ = 4 everywhere, 5^4 rounds at the exact truncated geometric law: measured speedup is
    10 · 3.3616 / 14.4 = 2.334 at batch size 1 and 20 · 3.3616 / 100 = 0.672 at 100."""
    t = Traces().deployment("spec", gamma=4).deployment("base", "none")
    t.regime("spec", fixed_gamma_block(4), 1, cheap).baseline("base", 1, 10.0)
    t.regime("spec", fixed_gamma_block(4) * 4, 100, lambda g: 20 + 20 * g).baseline("base", 100, 20.0)
    doc = recommend_for(t.write(tmp_path))
    low, high = only_bucket(doc, "1"), only_bucket(doc, "65-128")
    assert low["measured_speedup"] == pytest.approx(10 * 3.3616 / 14.4)
    assert high["measured_speedup"] == pytest.approx(20 * 3.3616 / 100)
    assert (low["recommended"], high["recommended"]) == (4, 0)
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
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 64, 4], [65, 128, 0]]
    text = render_recommend_markdown(doc)
    assert "| 1 | 4 | 10.000 | – | 2.334 | 1.000 | – | – | – | **2.334 (measured)** | 4 |" in text
    assert "- 65-128: only γ = 4 ran, so round cost can't be extrapolated: its measured speedup 0.672 ≤ 1" in text


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
    ws = api.open_traces(root)
    try:
        doc = api.recommend(ws, "spec", config=parse_config({"evidence": {"min_fit_r2": 0.0}}))
    finally:
        ws.close()
    b = only_bucket(doc)
    assert b["round_ms_source"] == {"1": "measured", "2": "fit", "3": "measured"}
    assert b["predicted_speedup"] == {"0": 1.0, "1": pytest.approx(20 / 10.2), "2": pytest.approx(3.0),
                                      "3": pytest.approx(40 / 9.8)}
    assert b["recommended"] == 3 and b["fit_used"] is True and b["fit_r2"] == pytest.approx(0.0, abs=1e-12)
    assert b["why"] == ("largest predicted speedup (γ = 0–3); γ = 2 from the round-cost fit; "
                        "β_tokens held at 0 (the unconstrained fit gave -0.2 ms/token)")
    text = render_recommend_markdown(doc)
    assert "| beta_tokens (unconstrained -0.20000) |" in text


def test_the_ranges_reach_the_largest_batch_size_the_deployment_ran(tmp_path):
    """Decode-only steps at batch size 1 only (the cheap sweep, k = 4); one prefill step of 300
    requests, which the fit leaves out: the last range is extended from 1 to 300, with a note."""
    t = Traces().deployment("spec").deployment("base", "none")
    t.regime("spec", pooled_block(), 1, cheap).baseline("base", 1, 10.0)
    t.step("spec", [(0, 0)] * 300, 80.0, prefill=4096)
    doc = recommend_for(t.write(tmp_path))
    assert [b["batch_bucket"] for b in doc["buckets"]] == ["1"]
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 300, 4]]
    assert ("The deployment ran at batch sizes up to 300, beyond its last bucket with decode-only steps "
            "(1, to 1): the last range's k = 4 is extended to 300, without a prediction there.") in doc["notes"]


def test_no_k_exceeds_num_speculative_tokens(tmp_path):
    """The cheap sweep drafts up to 8, but the deployment allows 3: k is at most 3."""
    t = Traces().deployment("spec", gamma=3).deployment("base", "none")
    t.regime("spec", pooled_block(), 1, cheap).baseline("base", 1, 10.0)
    doc = recommend_for(t.write(tmp_path))
    b = only_bucket(doc)
    assert list(b["predicted_speedup"]) == ["0", "1", "2", "3"]
    assert b["recommended"] == 3
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 1, 3]]


def test_513_plus_ends_at_the_largest_batch_size(tmp_path):
    t = Traces().deployment("spec", gamma=1).deployment("base", "none")
    t.regime("spec", fixed_gamma_block(1) * 120, 600, lambda g: 30.0).baseline("base", 600, 25.0)
    doc = recommend_for(t.write(tmp_path))
    b = only_bucket(doc, "513+")
    assert b["recommended"] == 1  # measured: 25 · 1.8 / 30 = 1.5
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
    t = Traces().deployment("spec", method="ngram").deployment("base", "none")
    t.regime("spec", pooled_block(), 1, cheap).baseline("base", 1, 10.0)
    doc = recommend_for(t.write(tmp_path))
    (note,) = [n for n in doc["notes"] if "Dynamic SD" in n]
    assert "EAGLE, EAGLE-3 and DFlash only" in note and "data parallelism" in note and "ngram" in note
    assert only_bucket(doc)["recommended"] == 4  # the note does not change the numbers


def test_unknown_deployment_names_it_and_the_known_ones(tmp_path):
    root = sweep(tmp_path, cheap)
    with pytest.raises(UnknownDeployment, match=r"unknown deployment 'nope'; known deployments: base, spec"):
        recommend_for(root, "nope")


def test_markdown_shows_every_gamma_and_the_config(two_regimes):
    text = render_recommend_markdown(recommend_for(two_regimes))
    assert '"num_speculative_tokens_per_batch_size": [[1, 64, 4], [65, 128, 0]]' in text
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
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 64, 4], [65, 128, 0]]
    assert {"batch_bucket", "observed_gamma", "predicted_speedup", "recommended", "baseline_ms_per_token",
            "fit_r2"} <= set(doc["buckets"][0])
    assert isinstance(doc["notes"], list)


def test_cli_markdown(two_regimes):
    result = run("recommend", two_regimes, "--deployment", "spec")
    assert result.exit_code == 0, result.output
    assert '"num_speculative_tokens_per_batch_size": [[1, 64, 4], [65, 128, 0]]' in result.output


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
