"""The "Quantization matrix" section of the report."""

from __future__ import annotations

from typing import Any

from .cells import DASH, gamma_text, num, pct, table, times


def render_quant_markdown(result: dict[str, Any]) -> str:
    """A "Quantization matrix" section: one table per model, the comparisons, the notes."""
    parts = ["## Quantization matrix\n\n"
             "Every deployment of a model is measured against the same reference: its `none` deployment "
             "with the highest-precision target. The ratio is throughput-weighted over the decode-only batch "
             "buckets both share (coverage: the share of the variant's decode-only tokens in them). "
             "A quantized draft changes only speed and acceptance; a quantized target changes what the "
             "output is exact to, so quality is compared with the reference. Quantization and speculation "
             "both relieve the memory-bound decode, so their speedups need not multiply.\n"]
    for entry in result["models"]:
        ref = entry["reference"]
        head = f"\n### {entry['model']}\n\n"
        if ref is None:
            head += "No reference baseline, so no matrix (see the notes).\n"
        else:
            head += f"Reference: {ref['deployment_id']} ({ref['target_quant']}, plain decoding).\n"
        parts.append(head)
        body = [(v["deployment_id"], v["variant"] or DASH, v["method"], gamma_text(v),
                 v["target_quant"], v["draft_quant"] or DASH, times(v["throughput_ratio"]), pct(v["coverage"]),
                 num(v["mean_quality"]), _signed(v["quality_delta"]), v["exact_to"] or DASH)
                for v in entry["variants"]]
        parts.append("\n" + table(["deployment", "variant", "method", "γ", "target", "draft", "throughput ratio",
                                   "coverage", "quality", "Δ quality", "output exact to"], body))
        if entry["comparisons"]:
            parts.append("\n" + "\n".join(f"- {c['sentence']}" for c in entry["comparisons"]) + "\n")
        if entry["notes"]:
            parts.append("\nNotes:\n\n" + "\n".join(f"- {n}" for n in entry["notes"]) + "\n")
    if result["notes"]:
        parts.append("\n" + "\n".join(f"- {n}" for n in result["notes"]) + "\n")
    return "".join(parts)


def _signed(value: float | None) -> str:
    if value is None:
        return DASH
    rounded = round(value, 3)
    return f"{rounded if rounded != 0 else 0.0:+.3f}"       # no "-0.000" from float noise
