"""The quantization matrix (seed section 6): views quant_variants and quant_matrix,
and analyzer.quant's pairing, comparison sentences and Markdown.

Every expected number is worked out by hand in the comment beside it. Each round
runs in a step of its own, so a round's time is its step's duration; batch_size is
the step's label that picks the batch bucket.
"""

from __future__ import annotations

import pytest

from analyzer import api
from analyzer.analysis import quant
from analyzer.render.quant import render_quant_markdown
from tracebuilder import at, write_traces

# --------------------------------------------------------------------------- builders


def dep(deployment_id: str, model: str, method: str, target_quant: str | None, gamma: int = 0,
        draft_quant: str | None = None, **extra) -> dict:
    row = {"deployment_id": deployment_id, "model": model, "method": method,
           "num_speculative_tokens": gamma, "draft_quant": draft_quant, **extra}
    if target_quant is not None:
        row["target_quant"] = target_quant
    return row


def request(deployment_id: str, request_id: str, quality: float | None = None, with_quality: bool = True) -> dict:
    row = {"deployment_id": deployment_id, "request_id": request_id, "arrival_time": at(0),
           "first_token_time": at(10), "finish_time": at(100), "prompt_tokens": 10, "output_tokens": 5,
           "finish_reason": "stop"}
    if with_quality:
        row["quality_score"] = quality
    return row


def run(deployment_id: str, request_id: str, rounds: list[tuple]) -> tuple[list[dict], list[dict]]:
    """Steps and rounds for one request: each (batch_size, duration_ms, drafted, accepted[, prefill])
    is one round in a step of its own; it commits accepted + 1 tokens."""
    steps, out = [], []
    for idx, (batch, duration, drafted, accepted, *prefill) in enumerate(rounds):
        step_id = idx                                    # one request per deployment
        steps.append({"deployment_id": deployment_id, "step_id": step_id, "start_time": at(100 * idx),
                      "duration_ms": duration, "batch_size": batch,
                      "num_prefill_tokens": prefill[0] if prefill else 0})
        out.append({"deployment_id": deployment_id, "request_id": request_id, "round_idx": idx,
                    "step_id": step_id, "num_draft_tokens": drafted, "num_accepted_tokens": accepted,
                    "num_committed_tokens": accepted + 1})
    return steps, out


def build(root, with_quality: bool = True):
    """Model m, with known ratios against base-bf16 (the reference):

    base-bf16 (none, bf16): batch 1: 4 rounds × 10 ms, 1 token each -> t0(1) = 40/4 = 10 ms;
                            batch 2: 2 rounds × 16 ms, 1 token each -> t0(2) = 32/2 = 16 ms.
    base-fp8 (none, fp8):   batch 1: 4 rounds × 5 ms (20 ms, 4 tokens; 2.0× in this bucket);
                            batch 2: 2 rounds × 12.5 ms (25 ms, 2 tokens; 16/12.5 = 1.28×).
                            ratio = (10·4 + 16·2) / (20 + 25) = 72 / 45 = 1.6
                            (the mean of the bucket ratios, 1.64, would be wrong).
    spec-bf16 (eagle γ=3, target bf16, draft bf16):
                            a prefill-step round (committed 2), left out of everything;
                            batch 1: 2 rounds × 12.5 ms committing 2 and 3 -> 25 ms, 5 tokens;
                            batch 4 (bucket 3-4, the reference has none): 1 round, 3 tokens, 20 ms.
                            ratio = 10·5 / 25 = 2.0; coverage = 5 / (5 + 3) = 0.625.
    spec-fp8 (eagle γ=3, target fp8, draft fp8):
                            batch 1: 5 rounds × 8 ms committing 2,2,2,2,3 = 11 tokens, 40 ms
                            (2.2 tokens per 8 ms round) -> ratio = 10·11/40 = 2.75.
                            product = 1.6 × 2.0 = 3.2; gap = 2.75/3.2 − 1 = −0.140625.
    spec-bf16-g5 (eagle γ=5, bf16): no rounds; spec_only, not paired (γ=3 exists).
    spec-fp32 (eagle, fp32): a target above the reference: no variant.
    spec-fp16 (eagle γ=3, fp16, no draft_quant, no rounds): ranks with bf16, so spec_only, with a
                            note; as a spec-only partner of spec-fp8 it ties spec-bf16 on method, γ
                            and draft (neither has fp8) and loses on having no ratio.

    Quality: base-bf16 0.80 and 0.90 -> 0.85; base-fp8 0.80 -> Δ −0.05;
    spec-bf16 0.85 -> Δ 0; spec-fp8 0.78 and 0.80 -> 0.79, Δ −0.06;
    spec-bf16-g5: one request with a null score -> no quality.

    Model tie: tie-a (none, bf16) and tie-b (none, fp16) share the top rank -> no matrix.
    Model nonone: only a speculative deployment -> no matrix.
    Model m2: m2-fp32 (none, fp32) is the reference; m2-odd (none, "gptq-ish", an unknown
    name: rank 0, so quant_only) on another gpu; m2-eagle-g2, m2-eagle-g6 (eagle, "FP32"):
    spec_only; m2-int4 (eagle γ=4, int4): combined, no quant_only with int4, spec pairing
    by nearest γ: 2 and 6 are both 2 away, the smaller wins.
    """
    deployments = [
        dep("base-bf16", "m", "none", "bf16"),
        dep("base-fp8", "m", "none", "fp8"),
        dep("spec-bf16", "m", "eagle", None, 3, "bf16"),       # target_quant absent: default bf16
        dep("spec-fp8", "m", "eagle", "fp8", 3, "fp8"),
        dep("spec-bf16-g5", "m", "eagle", "bf16", 5, "bf16"),
        dep("spec-fp32", "m", "eagle", "fp32", 3),
        dep("spec-fp16", "m", "eagle", "fp16", 3),
        dep("tie-a", "tie", "none", "bf16"),
        dep("tie-b", "tie", "none", "fp16"),
        dep("tie-spec", "tie", "eagle", "bf16", 3),
        dep("nn-spec", "nonone", "eagle", "bf16", 3),
        dep("m2-fp32", "m2", "none", "fp32", gpu="H200"),
        dep("m2-odd", "m2", "none", "gptq-ish", gpu="A100"),
        dep("m2-eagle-g2", "m2", "eagle", "FP32", 2),
        dep("m2-eagle-g6", "m2", "eagle", "FP32", 6),
        dep("m2-int4", "m2", "eagle", "int4", 4),
    ]
    plans = {
        ("base-bf16", "r1"): [(1, 10.0, 0, 0)] * 4 + [(2, 16.0, 0, 0)] * 2,
        ("base-fp8", "r1"): [(1, 5.0, 0, 0)] * 4 + [(2, 12.5, 0, 0)] * 2,
        ("spec-bf16", "r1"): [(1, 30.0, 3, 1, 100), (1, 12.5, 3, 1), (1, 12.5, 3, 2), (4, 20.0, 3, 2)],
        ("spec-fp8", "r1"): [(1, 8.0, 3, 1)] * 4 + [(1, 8.0, 3, 2)],
    }
    steps, rounds = [], []
    for (d, r), plan in plans.items():
        s, o = run(d, r, plan)
        steps += s
        rounds += o
    q = with_quality
    requests = [
        request("base-bf16", "r1", 0.80, q), request("base-bf16", "r2", 0.90, q),
        request("base-fp8", "r1", 0.80, q),
        request("spec-bf16", "r1", 0.85, q),
        request("spec-fp8", "r1", 0.78, q), request("spec-fp8", "r2", 0.80, q),
        request("spec-bf16-g5", "r1", None, q),
    ]
    return write_traces(root, deployments=deployments, requests=requests, steps=steps, rounds=rounds)


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    workspace = api.open_traces(build(tmp_path_factory.mktemp("quant")))
    yield workspace
    workspace.close()


@pytest.fixture(scope="module")
def result(ws):
    return quant.quant_matrix(ws.con)


def by_id(ws, view: str) -> dict[str, dict]:
    cur = ws.con.execute(f"select * from {view}")
    names = [d[0] for d in cur.description]
    return {row[0]: dict(zip(names, row)) for row in cur.fetchall()}


def model(result, name: str) -> dict:
    return next(m for m in result["models"] if m["model"] == name)


# --------------------------------------------------------------------------- views


def test_variants_are_classified_against_the_top_precision_baseline(ws):
    v = by_id(ws, "quant_variants")
    assert {d: v[d]["variant"] for d in ("base-bf16", "base-fp8", "spec-bf16", "spec-fp8", "spec-bf16-g5")} == {
        "base-bf16": "baseline", "base-fp8": "quant_only", "spec-bf16": "spec_only",
        "spec-fp8": "combined", "spec-bf16-g5": "spec_only"}
    assert {v[d]["reference_id"] for d in ("base-fp8", "spec-bf16", "spec-fp8")} == {"base-bf16"}
    assert v["spec-bf16"]["target_quant"] == "bf16"                 # the default
    # a target above the reference: no variant, with a note
    assert v["spec-fp32"]["variant"] is None
    assert v["spec-fp16"]["variant"] == "spec_only"
    assert v["spec-fp16"]["variant_note"] == ("spec-fp16: target fp16 ranks with the reference's bf16 but is "
                                              "another number format: its output is exact to the fp16 target")
    assert v["spec-fp32"]["variant_note"] == ("spec-fp32: target fp32 ranks above the reference base-bf16 "
                                              "(bf16), and no none deployment is at its precision")


def test_precision_ranks_unknown_names_lowest_and_case_insensitive(ws):
    v = by_id(ws, "quant_variants")
    assert v["m2-fp32"]["precision_rank"] == 32
    assert v["m2-eagle-g2"]["precision_rank"] == 32                # "FP32"
    assert v["base-bf16"]["precision_rank"] == 16
    assert v["base-fp8"]["precision_rank"] == 8
    assert v["m2-int4"]["precision_rank"] == 4
    assert v["m2-odd"]["precision_rank"] == 0                      # unknown: below every known name
    assert v["m2-odd"]["variant"] == "quant_only"
    assert v["m2-eagle-g2"]["variant"] == "spec_only"
    assert v["m2-int4"]["variant"] == "combined"
    assert v["m2-odd"]["variant_note"] == ("m2-odd runs on A100, the reference m2-fp32 on H200: "
                                           "its ratio mixes hardware with quantization")


def test_tie_and_missing_none_give_no_matrix(ws):
    v = by_id(ws, "quant_variants")
    for d in ("tie-a", "tie-b", "tie-spec"):
        assert v[d]["variant"] is None and v[d]["reference_id"] is None
        assert v[d]["variant_note"] == ("no quantization matrix for model tie: 2 none deployments share "
                                        "the top precision: tie-a (bf16), tie-b (fp16)")
    assert v["nn-spec"]["variant"] is None
    assert v["nn-spec"]["variant_note"] == "no quantization matrix for model nonone: it has no none deployment"


def test_throughput_ratio_coverage_and_quality(ws):
    q = by_id(ws, "quant_matrix")
    assert q["base-bf16"]["throughput_ratio"] == pytest.approx(1.0)   # 72 / 72
    assert q["base-bf16"]["coverage"] == pytest.approx(1.0)
    assert q["base-fp8"]["throughput_ratio"] == pytest.approx(1.6)    # 72 / 45
    assert q["base-fp8"]["shared_buckets"] == 2
    assert q["spec-bf16"]["throughput_ratio"] == pytest.approx(2.0)   # 50 / 25
    assert q["spec-bf16"]["coverage"] == pytest.approx(0.625)         # 5 / 8; the prefill round is left out
    assert q["spec-bf16"]["decode_committed"] == 8
    assert q["spec-fp8"]["throughput_ratio"] == pytest.approx(2.75)   # 110 / 40
    assert q["spec-fp8"]["coverage"] == pytest.approx(1.0)
    # no rounds: no ratio, with the reason
    assert q["spec-bf16-g5"]["throughput_ratio"] is None
    assert "spec-bf16-g5 has no decode-only round with a clean step" in q["spec-bf16-g5"]["note"]

    assert q["base-bf16"]["mean_quality"] == pytest.approx(0.85)      # (0.80 + 0.90) / 2
    assert q["base-bf16"]["quality_delta"] == pytest.approx(0.0)
    assert q["base-fp8"]["quality_delta"] == pytest.approx(-0.05)     # 0.80 − 0.85
    assert q["spec-bf16"]["quality_delta"] == pytest.approx(0.0)      # 0.85 − 0.85
    assert q["spec-fp8"]["mean_quality"] == pytest.approx(0.79)       # (0.78 + 0.80) / 2
    assert q["spec-fp8"]["quality_delta"] == pytest.approx(-0.06)     # 0.79 − 0.85
    assert q["spec-bf16-g5"]["mean_quality"] is None                  # its only score is null
    assert q["spec-bf16-g5"]["quality_requests"] == 0
    assert "no quality: spec-bf16-g5 has no request with a quality_score" in q["spec-bf16-g5"]["note"]


def test_quality_is_null_when_the_column_is_absent_everywhere(tmp_path):
    workspace = api.open_traces(build(tmp_path, with_quality=False))
    try:
        q = by_id(workspace, "quant_matrix")
        assert all(r["mean_quality"] is None and r["quality_delta"] is None and r["quality_requests"] is None
                   for r in q.values())
        assert q["base-fp8"]["throughput_ratio"] == pytest.approx(1.6)   # speed is unaffected
        assert q["spec-bf16-g5"]["note"] == \
            "no throughput ratio: spec-bf16-g5 has no decode-only round with a clean step"
    finally:
        workspace.close()


def test_exact_to_states_each_quality_reference(ws):
    q = by_id(ws, "quant_matrix")
    assert q["base-bf16"]["exact_to"] == "itself: the bf16 target is the reference"
    assert q["base-fp8"]["exact_to"] == "the fp8 target, a different reference from base-bf16 (bf16)"
    assert q["spec-bf16"]["exact_to"] == "the bf16 target; its bf16 draft changes only speed and acceptance"
    assert q["spec-fp8"]["exact_to"] == "the fp8 target, not the original bf16"
    assert q["m2-eagle-g2"]["exact_to"] == "the FP32 target"          # no draft_quant
    assert q["tie-spec"]["exact_to"] is None


# --------------------------------------------------------------------------- analyzer.quant


def test_result_shape_and_order(result):
    assert [m["model"] for m in result["models"]] == ["m", "m2", "nonone", "tie"]
    m = model(result, "m")
    assert m["reference"] == {"deployment_id": "base-bf16", "target_quant": "bf16",
                              "mean_quality": pytest.approx(0.85)}
    assert [v["deployment_id"] for v in m["variants"]] == [
        "base-bf16", "base-fp8", "spec-bf16", "spec-bf16-g5", "spec-fp16", "spec-fp8", "spec-fp32"]
    assert model(result, "tie")["reference"] is None
    assert model(result, "nonone")["reference"] is None
    assert result["notes"] == []


def test_combined_against_the_product_of_its_parts(result):
    (c,) = model(result, "m")["comparisons"]
    assert c["deployment_id"] == "spec-fp8"
    assert c["quant_only_id"] == "base-fp8"              # same target_quant fp8
    assert c["spec_only_id"] == "spec-bf16"              # same method eagle and γ=3 (not spec-bf16-g5)
    assert c["spec_pairing"] == "same method eagle and γ=3; draft bf16 vs fp8"
    assert c["combined_ratio"] == pytest.approx(2.75)
    assert c["product"] == pytest.approx(3.2)            # 1.6 × 2.0
    assert c["gap"] == pytest.approx(-0.140625)          # 2.75 / 3.2 − 1
    assert c["sentence"] == (
        "spec-fp8: combined 2.75× vs 1.60× (base-fp8, quant only) × 2.00× (spec-bf16, spec only) = 3.20× "
        "if they multiplied; 14% below the product. Spec-only pairing: same method eagle and γ=3; "
        "draft bf16 vs fp8. Its output is exact to the fp8 target, not the original bf16.")


def test_pairing_by_nearest_gamma_and_missing_quant_only(result):
    m2 = model(result, "m2")
    (c,) = m2["comparisons"]
    assert c["quant_only_id"] is None                    # no quant_only with int4
    assert c["spec_only_id"] == "m2-eagle-g2"            # γ 2 and 6 are both 2 from 4: the smaller
    assert c["spec_pairing"] == "same method eagle, nearest γ=2 (no spec_only with γ=4)"
    assert c["product"] is None and c["gap"] is None
    assert "m2-int4: no quant_only deployment with target int4 to pair with" in m2["notes"]
    assert "m2-int4: no throughput ratio, so no comparison with the product" in m2["notes"]
    assert c["sentence"] == (
        "m2-int4: combined ratio unknown; no product of its parts to compare with (see the notes). "
        "Spec-only pairing: same method eagle, nearest γ=2 (no spec_only with γ=4). "
        "Its output is exact to the int4 target, not the original fp32.")


def test_notes_for_models_without_a_matrix_and_missing_variants(result):
    assert model(result, "nonone")["notes"] == [
        "no quantization matrix for model nonone: it has no none deployment"]
    assert model(result, "tie")["comparisons"] == []
    assert model(result, "tie")["notes"] == [
        "no quantization matrix for model tie: 2 none deployments share the top precision: "
        "tie-a (bf16), tie-b (fp16)"]
    # a note with a comma or semicolon inside stays one note
    assert ("spec-fp32: target fp32 ranks above the reference base-bf16 (bf16), and no none deployment "
            "is at its precision") in model(result, "m")["notes"]
    # m2 has every variant; a model with only a baseline and spec would say what is missing
    assert not any(n.startswith("model m2: no") for n in model(result, "m2")["notes"])


def test_missing_variants_are_named(tmp_path):
    root = write_traces(tmp_path, deployments=[dep("b", "solo", "none", "bf16"),
                                               dep("s", "solo", "ngram", "bf16", 4)],
                        rounds=[])
    workspace = api.open_traces(root)
    try:
        (entry,) = quant.quant_matrix(workspace.con)["models"]
    finally:
        workspace.close()
    assert entry["comparisons"] == []
    assert "model solo: no quant_only deployment (method none at a lower target precision): " \
           "quantization alone is not measured" in entry["notes"]
    assert "model solo: no combined deployment (speculative with a lower-precision target)" in entry["notes"]
    assert not any("no spec_only deployment" in n for n in entry["notes"])
    assert "no throughput ratio: the steps table is absent, so round times are unknown" in entry["notes"]


def test_the_finding_names_what_each_part_is_measured_against(result):
    """The report's finding (issue 37): every ratio of the matrix is against the reference, so
    the quant-only 1.60× is base-fp8 against base-bf16, not the combined deployment against its
    quantized baseline, and the sentence says so. m2-int4 has no ratio: no finding."""
    from analyzer.render.markdown import _quant_findings

    assert _quant_findings({"quantization": result}) == [
        "- **spec-fp8** is 2.75× base-bf16 (faster), quantization and speculation combined; quantization alone "
        "(base-fp8 against base-bf16) is 1.60×; speculation alone (spec-bf16 against base-bf16) is 2.00× "
        "(Quantization matrix)."]


def test_markdown_section(result):
    text = render_quant_markdown(result)
    assert text.startswith("## Quantization matrix\n")
    assert "### m\n\nReference: base-bf16 (bf16, plain decoding)." in text
    assert ("| spec-fp8 | combined | eagle | 3 | fp8 | fp8 | 2.750× | 100.0% | 0.790 | -0.060 | "
            "the fp8 target, not the original bf16 |") in text
    assert "| spec-bf16 | spec_only | eagle | 3 | bf16 | bf16 | 2.000× | 62.5% | 0.850 | +0.000 |" in text
    assert "- spec-fp8: combined 2.75× vs 1.60× (base-fp8, quant only) × 2.00× (spec-bf16, spec only)" in text
    assert "### tie\n\nNo reference baseline, so no matrix (see the notes)." in text
    assert "| tie-spec | – | eagle |" in text
