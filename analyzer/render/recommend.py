"""`specan recommend` as Markdown."""

from __future__ import annotations

import json
from typing import Any

from .markdown import DASH, num, table


def render_recommend_markdown(result: dict[str, Any]) -> str:
    """The recommendation as Markdown: per bucket the predicted speedup of every γ, the
    recommended k, the vLLM config line, the cost fits and the notes."""
    dep = result["deployment_id"]
    parts = [f"# Speculation length for {dep}\n",
             f"Method {result.get('method')}, num_speculative_tokens {result.get('num_speculative_tokens')}, "
             f"baseline {result.get('baseline_id') or DASH}.\n"]
    buckets = result["buckets"]
    if buckets:
        gammas = sorted({int(g) for b in buckets for g in b["predicted_speedup"]})
        headers = (["batch bucket", "observed γ", "t0 ms/token", "fit R²", "measured speedup"]
                   + [f"γ={g}" for g in gammas] + ["recommended k"])
        body = []
        for b in buckets:
            cells = []
            for g in gammas:
                value = b["predicted_speedup"].get(str(g))
                text = DASH if value is None else f"{value:.3f}"
                if value is not None and b["round_ms_source"].get(str(g)) == "fit":
                    text = f"*{text}*"
                if g == b["recommended"]:
                    text = f"**{text}**"
                cells.append(text)
            body.append([b["batch_bucket"], ", ".join(str(g) for g in b["observed_gamma"]) or DASH,
                         num(b["baseline_ms_per_token"]), num(b["fit_r2"]), num(b["measured_speedup"]),
                         *cells, DASH if b["recommended"] is None else str(b["recommended"])])
        parts.append("## Predicted speedup per speculation length\n")
        parts.append(table(headers, body))
        parts.append("Predicted speedup = t0 · E[L](γ) / T_round(γ). T_round is the measured mean round time "
                     "where steps ran at that γ in the bucket, else the fitted cost model (*italics*). "
                     "γ = 0 is plain decoding (1.0). The recommended k is in **bold**.\n")
    ranges = result["num_speculative_tokens_per_batch_size"]
    parts.append("## vLLM config\n")
    if ranges:
        parts.append("```\n" + f'"num_speculative_tokens_per_batch_size": {json.dumps(ranges)}' + "\n```\n")
    else:
        parts.append("No recommendation (see the notes).\n")
    fits = result.get("cost_fits") or []
    if fits:
        headers = ["batch bucket", "steps", "α ms", "β tokens", "β batch", "q", "R²", "RMSE ms",
                   "γ varied", "mean residual per γ (ms)"]
        body = [[f["batch_bucket"], num(f["n_steps"]), num(f["alpha"]), num(f["beta_tokens"], 5),
                 num(f["beta_batch"], 5), num(f["q"], 7), num(f["r2"]), num(f["rmse"]),
                 num(f["gamma_varied"]) + (" (singular)" if f["singular"] else ""),
                 ", ".join(f"{g}: {v:+.3f}" for g, v in f["residuals"].items()) or DASH]
                for f in fits]
        parts.append("## Round-cost model\n")
        parts.append("T = α + β_tokens · X + β_batch · B (+ q · X²) per bucket, over decode-only steps; X = "
                     "tokens verified, B = batch size.\n")
        parts.append(table(headers, body))
    if result["notes"]:
        parts.append("## Notes\n")
        parts.append("\n".join(f"- {n}" for n in result["notes"]) + "\n")
    return "\n".join(parts)
