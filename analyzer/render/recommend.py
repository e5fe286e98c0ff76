"""`specan recommend` as Markdown."""

from __future__ import annotations

import json
from typing import Any

from ..analysis.precision import with_interval
from .cells import DASH, num, table


BY_CONTEXT_INTRO = ("The same procedure within each context bucket (rounds.context_len): E[L](γ) from that "
                    "bucket's conditional acceptance, round cost from the fit over that bucket's steps (a step's "
                    "context is its rounds' mean) where it has enough of them, t0 matched on batch and context.\n")
# vLLM takes one num_speculative_tokens_per_batch_size per deployment: a context's ranges
# are shown as what it would want, never as a second config to copy
CONTEXT_RANGES_NOTE = ("\nEach context's ranges are what that context alone would want, not a config: vLLM takes "
                       "batch-size ranges only, one list per deployment, and this deployment's is the overall "
                       "one. A cell with fewer decode rounds than min_context_cell_rounds takes the overall k.\n")


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
        headers = (["batch bucket", "observed γ", "t0 ms/token", "fit R²", "measured speedup", "evidence"]
                   + [f"γ={g}" for g in gammas] + ["recommended k"])
        body = []
        for b in buckets:
            cells = []
            for g in gammas:
                value = b["predicted_speedup"].get(str(g))
                text = DASH if value is None else f"{value:.3f}"
                if value is not None and b["round_ms_source"].get(str(g)) == "fit":
                    text = f"*{text}*"
                if value is not None and b.get("speedup_source", {}).get(str(g)) == "measured":
                    text = f"{text} (measured)"
                if g == b["recommended"]:
                    text = f"**{text}**"
                cells.append(text)
            body.append([b["batch_bucket"], ", ".join(str(g) for g in b["observed_gamma"]) or DASH,
                         num(b["baseline_ms_per_token"]), num(b["fit_r2"]), measured_with_interval(b),
                         b.get("evidence") or DASH, *cells, DASH if b["recommended"] is None else str(b["recommended"])])
        parts.append("## Predicted speedup per speculation length\n")
        parts.append(table(headers, body))
        parts.append("Predicted speedup = t0 · E[L](γ) / T_round(γ). T_round is the measured mean round time "
                     "where steps ran at that γ in the bucket, else the fitted cost model (*italics*). Where only "
                     "one γ ran in a bucket, that γ shows the bucket's measured speedup (measured) and no other γ "
                     "is predicted; the fit's R² is shown where the fit serves some γ. "
                     "γ = 0 is plain decoding (1.0). The recommended k is in **bold**. The measured speedup "
                     "carries its 95% interval, and decides: a bucket gets k > 0 only where that interval lies "
                     "above 1 on enough of the tokens (evidence pays), k = 0 where it lies below (loses) or the "
                     "baseline never ran there (no_baseline); an undecided bucket keeps k > 0 only between two "
                     "that pay.\n")
        parts.append("Why each k:\n\n" + "\n".join(
            f"- {b['batch_bucket']}: {b.get('why_k') or b['why']}"
            + (f" (the search: {b['why']})" if b.get("why_k") and b.get("why") else "")
            for b in buckets if b.get("why") or b.get("why_k")) + "\n")
    ranges = result["num_speculative_tokens_per_batch_size"]
    parts.append("## vLLM config\n")
    if ranges:
        parts.append("```\n" + f'"num_speculative_tokens_per_batch_size": {json.dumps(ranges)}' + "\n```\n")
        capped = result.get("config_speedup")
        if capped and capped.get("speedup") is not None:
            parts.append("On the same steps, with speculation off at batch "
                         + ", ".join(f"{a}-{b}" for a, b in capped["off"]) + ", that config gives "
                         + with_interval(capped["speedup"], *(capped["interval"] or (None, None)), suffix="×")
                         + " (the ranges with k > 0 at the length that ran).\n")
    else:
        parts.append("No recommendation (see the notes).\n")
    if result.get("by_context"):
        parts.append("## By context length\n")
        parts.append(BY_CONTEXT_INTRO)
        parts.append(by_context_markdown(result, detail=True))
    fits = result.get("cost_fits") or []
    if fits:
        headers = ["batch bucket", "steps", "α ms", "β tokens", "β batch", "q", "held at 0", "R²", "RMSE ms",
                   "γ varied", "mean residual per γ (ms)"]
        body = [[f["batch_bucket"], num(f["n_steps"]), num(f["alpha"]), num(f["beta_tokens"], 5),
                 num(f["beta_batch"], 5), num(f["q"], 7),
                 ", ".join(f"{name} (unconstrained {f['unconstrained'][name]:+.5f})"
                           for name in f.get("bound", [])) or DASH,
                 num(f["r2"]), num(f["rmse"]),
                 num(f["gamma_varied"]) + (" (singular)" if f["singular"] else ""),
                 ", ".join(f"{g}: {v:+.3f}" for g, v in f["residuals"].items()) or DASH]
                for f in fits]
        parts.append("## Round-cost model\n")
        parts.append("T = α + β_tokens · X + β_batch · B (+ q · X²) per bucket, over decode-only steps; X = "
                     "tokens verified, B = batch size. The slopes are held non-negative (no GPU verifies a token "
                     "in negative time); 'held at 0' names a slope the constraint held, with what the "
                     "unconstrained fit gave it. α is free.\n")
        parts.append(table(headers, body))
    if result["notes"]:
        parts.append("## Notes\n")
        parts.append("\n".join(f"- {n}" for n in result["notes"]) + "\n")
    return "\n".join(parts)


def measured_with_interval(bucket: dict[str, Any]) -> str:
    """A bucket's measured speedup with its 95 % interval, as far as it has one."""
    value, interval = bucket.get("measured_speedup"), bucket.get("measured_speedup_interval")
    if value is None:
        return DASH
    if interval:
        return with_interval(value, *interval, suffix="×")
    return f"{value:.3f}×"


def speedup_at_k(bucket: dict[str, Any]) -> str:
    """The speedup at the recommended k and where it comes from: measured (only that γ ran),
    predicted, or plain decoding (k = 0)."""
    value = bucket.get("speedup_at_k")
    if value is None:
        return DASH
    return f"{value:.3f}× ({bucket['speedup_at_k_source']})"


def by_context_markdown(result: dict[str, Any], *, detail: bool = False) -> str:
    """The recommendation within each context bucket: the ranges that context would want and
    where they differ from the overall ones (the deployment's one config). With ``detail``,
    every (context, batch) bucket's inputs and the notes as well."""
    entries = result["by_context"]
    body = [(e["context_bucket"], f"{e['share_of_rounds']:.1%}" if e["share_of_rounds"] is not None else DASH,
             json.dumps(e["ranges"]) if e["ranges"] else DASH,
             "; ".join(f"batch {d['batch_bucket']}: k = {d['k']} (overall {d['overall_k']}; {d['num_rounds']:,} rounds)"
                       for d in e["differs_from_overall"]) or "no")
            for e in entries]
    parts = [table(["context", "decode rounds", "what this context would want", "differs from overall"], body)]
    if not any(e["differs_from_overall"] for e in entries):
        parts.append("\nEvery context bucket gives the overall answer where both have one.\n")
    parts.append(CONTEXT_RANGES_NOTE)
    if detail:
        rows = [(e["context_bucket"], b["batch_bucket"], ", ".join(map(str, b["observed_gamma"])) or DASH,
                 b["cost_fit"], b["t0_match"] or DASH, num(b["measured_speedup"]),
                 DASH if b["recommended"] is None else str(b["recommended"]), speedup_at_k(b), b["why"])
                for e in entries for b in e["buckets"]]
        parts.append("\n" + table(["context", "batch", "observed γ", "cost fit", "t0 matched on", "measured speedup",
                                   "recommended k", "speedup at k", "why"], rows))
        notes = [f"{e['context_bucket']}: {n}" for e in entries for n in e["notes"]]
        if notes:
            parts.append("\n" + "\n".join(f"- {n}" for n in notes) + "\n")
    return "".join(parts)
