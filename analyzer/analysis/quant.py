"""The quantization matrix: baseline, quant only, spec only and combined, measured apart.

Seed section 6: a quantized *draft* changes only the proposal distribution q, so the
output stays the target's p and only speed and acceptance change; a quantized
*target* changes the verification reference to p_quant, so speculative decoding is
exact to the quantized model, not the original. And the two speedups do not
multiply: both relieve the memory-bound decode. So each variant is measured against
the same top-precision reference, with its own quality reference stated, and each
combined deployment is set beside the product of its quant-only and spec-only parts.

The SQL does the measuring (``sql/staging/quant_variants.sql`` classifies, with the
precision ranking; ``sql/marts/quant_matrix.sql`` computes throughput_ratio,
coverage and quality). This module pairs and explains:

Precision ranking (effective bits, from ``quant_variants.sql``): fp32 (32) >
bf16 = fp16 (16) > fp8 = int8 (8) > fp6 (6) > fp4 = int4 = nvfp4 = mxfp4 (4) >
any unknown name (0). The reference of a model is its single `none` deployment
at the top rank; a tie, or no `none` deployment at all, means no matrix.

Pairing rule, for a combined deployment C:

- quant only: C's matched baseline (docs/metrics.md) when it is a quant_only
  deployment with C's target_quant; otherwise the single quant_only deployment
  whose target_quant equals C's (case-insensitive). Several candidates and no
  matched baseline among them: no pairing, with a note naming them.
- spec only: a spec_only deployment with C's method, in this order of
  preference: the same num_speculative_tokens; then the nearest
  num_speculative_tokens (the smaller on a tie). Among equals: the same
  draft_quant, then one with a throughput ratio, then the lowest deployment_id.
  A different method is never paired: its speedup says nothing about C's.

product = quant_only ratio × spec_only ratio; gap = combined / product − 1
(negative: the combination gives less than the two parts would if they
multiplied).

``quant_matrix(con)`` returns::

    {"models": [{
        "model": "m",
        "reference": {"deployment_id", "target_quant", "mean_quality"} | None,
        "variants": [{"deployment_id", "variant", "method", "num_speculative_tokens",
                      "target_quant", "draft_quant", "precision_rank", "reference_id",
                      "throughput_ratio", "coverage", "shared_buckets", "mean_quality",
                      "quality_requests", "quality_delta", "exact_to", "note"}],
        "comparisons": [{"deployment_id", "combined_ratio",
                         "quant_only_id", "quant_only_ratio",
                         "spec_only_id", "spec_only_ratio", "spec_pairing",
                         "product", "gap", "sentence"}],
        "notes": ["..."]}],
     "notes": ["..."]}

Variants are ordered baseline, quant_only, spec_only, combined, then unclassified,
each by deployment_id.
"""

from __future__ import annotations

from typing import Any

import duckdb

VARIANT_ORDER = ("baseline", "quant_only", "spec_only", "combined")

_VARIANT_COLUMNS = (
    "deployment_id", "variant", "method", "num_speculative_tokens", "target_quant", "draft_quant",
    "precision_rank", "reference_id", "throughput_ratio", "coverage", "shared_buckets", "mean_quality",
    "quality_requests", "quality_delta", "exact_to", "note",
)


def quant_matrix(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """The matrix per model, with the combined-vs-product comparisons and notes."""
    cur = con.execute("""
        select q.*, m.baseline_id as matched_baseline_id
        from quant_matrix as q
        left join matched_baseline as m on m.deployment_id = q.deployment_id
        order by q.model, q.deployment_id""")
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, row)) for row in cur.fetchall()]

    by_model: dict[str, list[dict]] = {}
    for row in rows:
        by_model.setdefault(row["model"], []).append(row)

    notes: list[str] = []
    if not rows:
        notes.append("no deployments: no quantization matrix")
    models = [_model_entry(model, model_rows) for model, model_rows in by_model.items()]
    return {"models": models, "notes": notes}


def _order(row: dict) -> tuple:
    variant = row["variant"]
    rank = VARIANT_ORDER.index(variant) if variant in VARIANT_ORDER else len(VARIANT_ORDER)
    return rank, row["deployment_id"]


def _model_entry(model: str, rows: list[dict]) -> dict[str, Any]:
    rows = sorted(rows, key=_order)
    notes: list[str] = []
    for row in rows:
        for part in row["notes"] or []:  # a list from the SQL: no join and split, so a note may hold "; "
            if part not in notes:
                notes.append(part)

    base = next((r for r in rows if r["variant"] == "baseline"), None)
    reference = None
    if base is not None:
        reference = {"deployment_id": base["deployment_id"], "target_quant": base["target_quant"],
                     "mean_quality": base["mean_quality"]}
        for variant, missing in (
                ("quant_only", "no quant_only deployment (method none at a lower target precision): "
                               "quantization alone is not measured"),
                ("spec_only", f"no spec_only deployment (speculative with a {base['target_quant']} target): "
                              "speculation alone is not measured"),
                ("combined", "no combined deployment (speculative with a lower-precision target)")):
            if not any(r["variant"] == variant for r in rows):
                notes.append(f"model {model}: {missing}")

    comparisons = []
    if base is not None:
        quant_only = [r for r in rows if r["variant"] == "quant_only"]
        spec_only = [r for r in rows if r["variant"] == "spec_only"]
        for combined in (r for r in rows if r["variant"] == "combined"):
            comparison, comparison_notes = _compare(combined, quant_only, spec_only, base)
            comparisons.append(comparison)
            notes.extend(n for n in comparison_notes if n not in notes)

    return {
        "model": model,
        "reference": reference,
        "variants": [{k: r[k] for k in _VARIANT_COLUMNS} for r in rows],
        "comparisons": comparisons,
        "notes": notes,
    }


def _pair_quant_only(combined: dict, quant_only: list[dict]) -> tuple[dict | None, str | None]:
    quant = combined["target_quant"].lower()
    same = [r for r in quant_only if r["target_quant"].lower() == quant]
    dep = combined["deployment_id"]
    if not same:
        return None, f"{dep}: no quant_only deployment with target {combined['target_quant']} to pair with"
    matched = [r for r in same if r["deployment_id"] == combined["matched_baseline_id"]]
    if matched:
        return matched[0], None
    if len(same) == 1:
        return same[0], None
    ids = ", ".join(r["deployment_id"] for r in same)
    return None, (f"{dep}: {len(same)} quant_only deployments have target {combined['target_quant']} "
                  f"({ids}) and none is its matched baseline; set baseline_id to pick one")


def _pair_spec_only(combined: dict, spec_only: list[dict]) -> tuple[dict | None, str | None, str | None]:
    """The spec_only partner, how it was chosen, and a note when there is none."""
    dep = combined["deployment_id"]
    same_method = [r for r in spec_only if r["method"] == combined["method"]]
    if not same_method:
        return None, None, f"{dep}: no spec_only deployment with method {combined['method']} to pair with"
    gamma = combined["num_speculative_tokens"]

    def key(r: dict) -> tuple:
        return (abs(r["num_speculative_tokens"] - gamma), r["num_speculative_tokens"],
                (r["draft_quant"] or "").lower() != (combined["draft_quant"] or "").lower(),
                r["throughput_ratio"] is None, r["deployment_id"])

    best = min(same_method, key=key)
    if best["num_speculative_tokens"] == gamma:
        how = f"same method {combined['method']} and γ={gamma}"
    else:
        how = (f"same method {combined['method']}, nearest γ={best['num_speculative_tokens']} "
               f"(no spec_only with γ={gamma})")
    if (best["draft_quant"] or "").lower() != (combined["draft_quant"] or "").lower():
        how += f"; draft {best['draft_quant'] or 'unset'} vs {combined['draft_quant'] or 'unset'}"
    return best, how, None


def _ratio(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}×"


def _compare(combined: dict, quant_only: list[dict], spec_only: list[dict],
             base: dict) -> tuple[dict, list[str]]:
    notes: list[str] = []
    dep = combined["deployment_id"]
    q, q_note = _pair_quant_only(combined, quant_only)
    s, how, s_note = _pair_spec_only(combined, spec_only)
    notes += [n for n in (q_note, s_note) if n]

    c_ratio = combined["throughput_ratio"]
    q_ratio = q["throughput_ratio"] if q else None
    s_ratio = s["throughput_ratio"] if s else None
    product = q_ratio * s_ratio if q_ratio is not None and s_ratio is not None else None
    gap = c_ratio / product - 1 if c_ratio is not None and product else None

    for partner in (q, s):
        if partner is not None and partner["throughput_ratio"] is None:
            notes.append(f"{dep}: its partner {partner['deployment_id']} has no throughput ratio, so no product")
    if c_ratio is None:
        notes.append(f"{dep}: no throughput ratio, so no comparison with the product")

    ref = f"{base['deployment_id']} ({base['target_quant']})"
    if q is not None and s is not None:
        sentence = (f"{dep}: combined {_ratio(c_ratio)} vs {_ratio(q_ratio)} ({q['deployment_id']}, quant only) "
                    f"× {_ratio(s_ratio)} ({s['deployment_id']}, spec only) = {_ratio(product)} "
                    f"if they multiplied")
        if gap is not None:
            sentence += f"; {abs(gap):.0%} {'below' if gap < 0 else 'above'} the product"
        sentence += "."
    else:
        sentence = (f"{dep}: combined {_ratio(c_ratio)} against {ref}" if c_ratio is not None else
                    f"{dep}: combined ratio unknown")
        sentence += "; no product of its parts to compare with (see the notes)."
    if how is not None and how != f"same method {combined['method']} and γ={combined['num_speculative_tokens']}":
        sentence += f" Spec-only pairing: {how}."
    sentence += (f" Its output is exact to the {combined['target_quant']} target, not the original "
                 f"{base['target_quant']}.")
    return {
        "deployment_id": dep,
        "combined_ratio": c_ratio,
        "quant_only_id": q["deployment_id"] if q else None,
        "quant_only_ratio": q_ratio,
        "spec_only_id": s["deployment_id"] if s else None,
        "spec_only_ratio": s_ratio,
        "spec_pairing": how,
        "product": product,
        "gap": gap,
        "sentence": sentence,
    }, notes
