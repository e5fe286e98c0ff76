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

from ..analysis.precision import with_interval
from .cells import DASH, num, pct, table, times


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
                   "predicted speedup", "round cost", "measured accept length", "measured tokens/round",
                   "measured no-draft share", "measured speedup"]
        body = []
        rows = [(r, "all") for r in res["deployments"]] + [(r, r["category"]) for r in res["categories"]]
        rows.sort(key=lambda item: (item[0]["deployment_id"], item[1] != "all", item[1]))
        for r, cat in rows:
            m = r["measured"] or {}
            body.append([
                r["deployment_id"], f"**{cat}**" if cat == "all" and "category" not in r else cat,
                num(r["num_requests"]), num(r["mean_accept_length"]), num(r["tokens_per_round"]),
                pct(r["no_draft_share"]), speedup_text(r, "predicted_speedup"), round_cost_label(r),
                num(m.get("mean_accept_length")), num(m.get("tokens_per_round")), pct(m.get("no_draft_share")),
                times(m.get("speedup")),
            ])
        parts.append(f"## {heading}\n")
        parts.append(table(headers, body))
        parts += [_baseline(r, res["variant"]) for r in res["deployments"] if r["predicted_by_batch"] is not None]
        reasons = sorted({(r["deployment_id"], r["predicted_speedup_note"]) for r, _ in rows
                          if r["predicted_speedup_note"]})
        lines = [f"- Replayed {res['tokens_replayed']:,} tokens of {res['num_requests_replayed']:,} requests."]
        lines += [f"- {note}" for note in res["notes"]]
        lines += [f"- {dep}: no predicted speedup ({note})." for dep, note in _first_per_dep(reasons)]
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


ASSUMPTION_LABELS = {"own_round_time": "own", "free_verify": "free (upper bound)"}


def speedup_text(row: dict[str, Any], key: str) -> str:
    """A predicted speedup with its 95% interval, to the decimals the interval supports."""
    if row.get(key) is None:
        return DASH
    return with_interval(row[key], *(row.get(f"{key}_interval") or (None, None)), suffix="×")


def round_cost_label(row: dict[str, Any]) -> str:
    """What the row's round time is: own, a named deployment's fit, a per-token cost, or free."""
    assumption = row.get("round_cost_assumption")
    if assumption == "cost_fit":
        return f"{row['round_cost_source']}'s fit"
    if assumption == "per_token":
        return "per-token cost"
    return ASSUMPTION_LABELS.get(assumption, DASH)


def _baseline(r: dict[str, Any], variant: str) -> str:
    """A baseline's prediction of turning the drafter on: the number beside its assumption,
    the upper bound, what it rests on, and the buckets."""
    drafter = {"prompt_lookup": "prompt lookup", "suffix": "suffix drafting"}[variant]
    dep, buckets = r["deployment_id"], r["predicted_by_batch"]
    lines = [f"### {dep}: turning {drafter} on\n"]
    used = [b["batch_bucket"] for b in buckets if b["speedup"] is not None]
    left = [f"{b['batch_bucket']} ({b['left_out']})" for b in buckets if b["left_out"]]
    if r["predicted_speedup"] is not None:
        text = f"Predicted **{speedup_text(r, 'predicted_speedup')}** {r['round_cost_statement']}"
        if r["round_cost_assumption"] != "free_verify" and r["predicted_speedup_upper_bound"] is not None:
            text += f"; {speedup_text(r, 'predicted_speedup_upper_bound')} if verification were free (an upper bound)"
        text += (f". It rests on {r['num_requests']:,} replayed requests and {len(used)} batch "
                 f"bucket{'s' if len(used) != 1 else ''} ({', '.join(used)}), "
                 f"{pct(r['predicted_speedup_coverage'])} of {dep}'s rounds")
    else:
        text = f"No prediction: {r['predicted_speedup_note']}"
    text += f"; left out: {'; '.join(left)}." if left else "."
    lines.append(text + "\n")
    if buckets:
        headers = ["batch bucket", "decode steps", "requests", "rounds", "t0 ms", "mean batch", "tokens verified/step",
                   "round ms", "fit R²", "speedup", "upper bound"]
        lines.append(table(headers, [
            (b["batch_bucket"], num(b["decode_steps"]), num(b["decode_requests"]), num(b["num_rounds"]),
             num(b["t0_ms"]), num(b["mean_batch_size"], 1), num(b["tokens_verified_per_step"], 1),
             num(b["round_ms"]), num(b["fit_r2"], 2) if r["round_cost_assumption"] == "cost_fit" else DASH,
             times(b["speedup"]), times(b["speedup_upper_bound"]))
            for b in buckets]))
    return "\n".join(lines)


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
