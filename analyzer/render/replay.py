"""`specan replay-ngram` as Markdown, and its timing for stderr.

The replay's wall-clock time (``replay_seconds``, ``tokens_per_s`` in each
result) differs from run to run, so it stays out of the document: the Markdown
says how many tokens were replayed, not how fast, and ``move_timing_to_stderr``
prints the timing on stderr and drops it from the results before they are
written as JSON. Two runs on the same traces give the same stdout.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from typing import Any, TextIO

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
        lines = [f"- Replayed {res['tokens_replayed']:,} tokens of {res['num_requests_replayed']:,} requests."]
        lines += [f"- {note}" for note in res["notes"]]
        lines += [f"- {dep}: no predicted speedup ({note})." for dep, note in _first_per_dep(reasons)]
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def _first_per_dep(reasons: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: dict[str, list[str]] = defaultdict(list)
    for dep, note in reasons:
        seen[dep].append(note)
    return [(dep, "; ".join(notes)) for dep, notes in seen.items()]


TIMING_KEYS = ("replay_seconds", "tokens_per_s")


def timing_lines(results: list[dict[str, Any]]) -> str:
    """One line per replay: tokens and requests replayed, seconds and tokens per second."""
    lines = []
    for res in results:
        rate = res.get("tokens_per_s")
        lines.append(f"{res['variant']}: replayed {res['tokens_replayed']:,} tokens of "
                     f"{res['num_requests_replayed']:,} requests in {res['replay_seconds']:.1f} s"
                     + (f" ({rate:,.0f} tokens/s)" if rate else ""))
    return "\n".join(lines)


def move_timing_to_stderr(results: list[dict[str, Any]], stream: TextIO | None = None) -> list[dict[str, Any]]:
    """Print the replays' timing on ``stream`` (stderr by default) and return the results
    without it (``TIMING_KEYS``), ready to be written as the JSON document."""
    timed = [res for res in results if "replay_seconds" in res]
    if timed:
        print(timing_lines(timed), file=stream if stream is not None else sys.stderr)
    return [{key: value for key, value in res.items() if key not in TIMING_KEYS} for res in results]
