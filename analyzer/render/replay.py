"""`specan replay-ngram` as Markdown."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .markdown import DASH, num, pct, table, times


def render_markdown(results: list[dict[str, Any]]) -> str:
    """The replays as Markdown: one table per variant, then its notes."""
    title = {"prompt_lookup": "Prompt lookup", "suffix": "Suffix drafting"}
    parts = ["# n-gram replay\n"]
    for res in results:
        p = res["parameters"]
        if res["variant"] == "prompt_lookup":
            heading = f"{title['prompt_lookup']} (n = {p['min_n']}..{p['max_n']}, k = {p['k']})"
        else:
            heading = f"{title['suffix']} (m = {p['min_n']}..{p['max_match']}, γ = min({p['max_k']}, m))"
        headers = ["deployment", "category", "requests", "accept length", "tokens/round", "no-draft share",
                   "predicted speedup", "measured accept length", "measured tokens/round",
                   "measured no-draft share", "measured speedup"]
        body = []
        rows = [(r, "all") for r in res["deployments"]] + [(r, r["category"]) for r in res["categories"]]
        rows.sort(key=lambda item: (item[0]["deployment_id"], item[1] != "all", item[1]))
        for r, cat in rows:
            m = r["measured"] or {}
            body.append([
                r["deployment_id"], f"**{cat}**" if cat == "all" and "category" not in r else cat,
                num(r["num_requests"]), num(r["mean_accept_length"]), num(r["tokens_per_round"]),
                pct(r["no_draft_share"]), times(r["predicted_speedup"]) if r["predicted_speedup"] is not None
                else DASH,
                num(m.get("mean_accept_length")), num(m.get("tokens_per_round")), pct(m.get("no_draft_share")),
                times(m.get("speedup")),
            ])
        parts.append(f"## {heading}\n")
        parts.append(table(headers, body))
        reasons = sorted({(r["deployment_id"], r["predicted_speedup_note"]) for r, _ in rows
                          if r["predicted_speedup_note"]})
        rate = res["tokens_per_s"]
        lines = [f"- Replayed {res['tokens_replayed']:,} tokens of {res['num_requests_replayed']:,} requests "
                 f"in {res['replay_seconds']:.1f} s"
                 + (f" ({rate:,.0f} tokens/s)." if rate else ".")]
        lines += [f"- {note}" for note in res["notes"]]
        lines += [f"- {dep}: no predicted speedup ({note})." for dep, note in _first_per_dep(reasons)]
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def _first_per_dep(reasons: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: dict[str, list[str]] = defaultdict(list)
    for dep, note in reasons:
        seen[dep].append(note)
    return [(dep, "; ".join(notes)) for dep, notes in seen.items()]
