"""What a speculative deployment's speedup rests on: the number the verdict decides with.

``speedup_evidence(doc)`` reads the report document and returns, per speculative
deployment, the one speedup the capacity gate and the verdict use (docs/metrics.md,
"The verdict")::

    {"basis", "speedup", "interval", "coverage", "num_requests", "baseline_id",
     "baseline_num_requests", "reason", "loads", "baseline_loads", "variance",
     "matched_on", "not_matched", "never_met", "unmatched", "decode_steps", "counts_from"}

``basis`` says what the speedup rests on, the first that applies:

- ``rounds``: the deployment has rounds with clean steps, so the speedup matched on the
  batch size and context each of its decode steps ran at decides, even where it is null
  (then nothing else stands in: a comparison of request timings is no substitute for a
  baseline missing at the loads it ran);
- ``steps``: no rounds, but decode steps with their own token counts (engine iteration
  lines): ``matched["steps"]``, matched on the batch size each step ran at, even where it
  is null; ``decode_steps`` and ``counts_from`` say what it rests on (``window``: the
  committed tokens per step were spread from a log window's acceptance);
- ``tpot``: no steps, but request timings on both sides: ``tpot_speedup``, matched on
  the concurrency each request decoded at (from the timings);
- ``logs``: only engine log intervals: ``log_speedup``, matched on the running requests
  each interval ended with;
- ``None``: nothing to decide with; ``reason`` says why.

``loads`` and ``baseline_loads``: the least and most load each side ran at (batch size,
concurrency or running requests), to name when they do not meet. ``variance``: each
side's share of the uncertainty of log(speedup) (``analysis.uncertainty``), from which
``settle`` says which side is short. ``never_met``: no unit of it was matched although
both sides ran at some load; ``unmatched``: its units left out, per reason (``load_gap``,
``below_baseline_loads``, ...), which the verdict names when the two load ranges overlap
and still nothing matched. ``matched_on``: what the comparison holds equal
(load, and context where both sides' steps have context lengths); ``not_matched``: what
it does not, which the decision must not ship on (docs/metrics.md, "Like with like"):
``context`` when context is not in the match and the two sides' median prompt lengths
lie more than ``PROMPT_MISMATCH`` apart.
"""

from __future__ import annotations

from typing import Any

BASES = ("rounds", "steps", "tpot", "logs")

# Where each basis's numbers are in a deployment entry of the report document.
_KEYS = {
    "rounds": ("speedup", "speedup_interval", "speedup_coverage"),
    "tpot": ("tpot_speedup", "tpot_speedup_interval", "tpot_speedup_coverage"),
    "logs": ("log_speedup", "log_speedup_interval", "log_speedup_coverage"),
}
# Two sides whose median prompt lengths differ by more than this fraction (of the larger)
# are not matched on context unless the context term is in the match.
PROMPT_MISMATCH = 0.25


def basis_of(d: dict[str, Any], logged: set[str] = frozenset()) -> str | None:
    """The basis of one deployment entry (see the module docstring); ``logged``: the
    deployments with log intervals. A deployment known only from its logs is judged by
    them even when their speedup is null (too few lines, or no baseline log)."""
    if (d.get("round_ms") or {}).get("mean") is not None:
        return "rounds"
    if d.get("iteration_steps"):
        return "steps"
    if d.get("tpot_speedup") is not None or (d.get("matched") or {}).get("tpot"):
        return "tpot"
    if d.get("log_speedup") is not None or d["deployment_id"] in logged:
        return "logs"
    return None


def prompt_mismatch(d: dict[str, Any], base: dict[str, Any] | None) -> tuple[float, float] | None:
    """The two sides' median prompt lengths when they lie more than PROMPT_MISMATCH apart."""
    if base is None:
        return None
    mine, theirs = d.get("prompt_tokens_median"), base.get("prompt_tokens_median")
    if not mine or not theirs:
        return None
    if abs(mine - theirs) > PROMPT_MISMATCH * max(mine, theirs):
        return mine, theirs
    return None


def speedup_evidence(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per speculative deployment id, the speedup it is judged by (module docstring)."""
    by_id = {d["deployment_id"]: d for d in doc["deployments"]}
    logged = {r["deployment_id"] for r in doc.get("intervals") or []}
    out: dict[str, dict[str, Any]] = {}
    for d in doc["deployments"]:
        if d["method"] == "none":
            continue
        basis = basis_of(d, logged)
        value = interval = coverage = None
        matched = (d.get("matched") or {}).get(basis) or {} if basis else {}
        if basis == "steps":
            # steps with their own token counts have no deployment-level keys: the matched entry is all
            value, interval, coverage = matched.get("speedup"), matched.get("interval"), matched.get("coverage")
        elif basis is not None:
            value_key, interval_key, coverage_key = _KEYS[basis]
            value, interval, coverage = d.get(value_key), d.get(interval_key), d.get(coverage_key)
        # a logs speedup resamples log intervals, and a steps one iterations, not requests; a TPOT
        # speedup counts the requests with both times
        by_requests = basis not in ("logs", "steps")
        own = d.get("tpot_speedup_requests") if basis == "tpot" else (by_id.get(d["deployment_id"]) or {}).get(
            "num_requests")
        base = by_id.get(d.get("baseline_id")) if d.get("baseline_id") else None
        context_known = bool(matched.get("context_known"))
        matched_on = ["load", "context"] if context_known else ["load"]
        mismatch = None if context_known else prompt_mismatch(d, base)
        out[d["deployment_id"]] = {
            "basis": basis, "speedup": value, "interval": interval, "coverage": coverage,
            "num_requests": own if by_requests else None,
            "baseline_id": d.get("baseline_id"),
            "baseline_num_requests": (base or {}).get("num_requests") if by_requests else None,
            "reason": None if value is not None else _why_unknown(d, basis, logged, matched),
            "loads": matched.get("loads"), "baseline_loads": matched.get("baseline_loads"),
            "variance": matched.get("variance"), "blocks": matched.get("blocks"),
            "matched_on": matched_on if basis else [],
            "context_known": context_known,
            "not_matched": ([{"on": "context", "prompt_tokens_median": mismatch[0],
                              "baseline_prompt_tokens_median": mismatch[1]}] if mismatch else []),
            "never_met": bool(value is None and matched.get("loads") and matched.get("baseline_loads")),
            "unmatched": dict(matched.get("unmatched") or {}),
            "decode_steps": (d.get("iteration_steps") or {}).get("decode_steps") if basis == "steps" else None,
            "counts_from": (d.get("iteration_steps") or {}).get("counts_from") if basis == "steps" else None,
        }
    return out


def _why_unknown(d: dict[str, Any], basis: str | None, logged: set[str], matched: dict[str, Any]) -> str:
    """Why a deployment has no speedup to decide with, in words a note can carry."""
    if d.get("baseline_id") is None:
        return d.get("speedup_note") or "no matched baseline"
    if matched.get("loads") and matched.get("baseline_loads"):
        ran = (f"it ran at {load_range(matched['loads'], basis)} and {d['baseline_id']} at "
               f"{load_range(matched['baseline_loads'], basis)}")
        if not ranges_meet(matched["loads"], matched["baseline_loads"]):
            return f"{ran}: never at comparable loads"
        return f"{ran}, but {unmatched_text(matched.get('unmatched') or {}, basis, d['baseline_id'])}"
    if basis == "rounds":
        return d.get("speedup_note") or "the speedup is unknown"
    if basis == "steps":
        return (f"its baseline {d['baseline_id']} has no decode step with its own token counts at a load with at "
                "least [evidence] min_baseline_steps of them (iteration lines of a plain server give them)")
    if basis == "logs":
        if d.get("baseline_id") not in logged:
            return (f"its baseline {d['baseline_id']} has no log intervals: the speedup from logs compares both "
                    "sides' logged generation throughput")
        return (d.get("log_speedup_evidence") or {}).get("note") or "the speedup from logs is unknown"
    if basis == "tpot":
        # none of its requests timed, or too few at every concurrency: both leave no point of its curve
        return (f"not enough data: its baseline {d['baseline_id']} ran no concurrency with enough requests that have "
                "both a first-token and a finish time ([evidence] min_baseline_requests)")
    return "no steps, and no request timings or log intervals on both sides"


LOAD_NOUNS = {"rounds": "batch", "steps": "batch", "tpot": "concurrency", "logs": "running requests"}
UNIT_NOUNS = {"rounds": ("step", "steps"), "steps": ("step", "steps"), "tpot": ("request", "requests"), "logs": ("log interval", "log intervals")}


def ranges_meet(loads: list[float], baseline_loads: list[float]) -> bool:
    """Whether two [least, most] load ranges overlap."""
    return not (loads[1] < baseline_loads[0] or loads[0] > baseline_loads[1])


def unmatched_text(unmatched: dict[str, int], basis: str | None, base: str) -> str:
    """Why none of a deployment's units was matched although the two sides' load ranges meet:
    "none of its 12 requests was matched: 9 lie between plain's measured concurrencies too
    far apart ([evidence] max_load_gap), 3 below every concurrency plain measured"."""
    one, many = UNIT_NOUNS.get(basis or "rounds", ("unit", "units"))
    noun = LOAD_NOUNS.get(basis or "rounds", "batch")
    why = {
        "load_gap": f"between {base}'s measured {noun} values too far apart ([evidence] max_load_gap)",
        "below_baseline_loads": f"below every {noun} {base} measured",
        "above_baseline_loads": f"above every {noun} {base} measured",
        "context_out_of_range": f"at contexts {base}'s steps never held there ([evidence] context_margin)",
        "no_baseline_loads": f"where {base} measured no load with enough units ([evidence] floors)",
    }
    total = sum(unmatched.values())
    parts = [f"{n:,} {why.get(reason, reason)}" for reason, n in sorted(unmatched.items(), key=lambda kv: -kv[1])]
    head = f"none of its {total:,} {one if total == 1 else many} was matched"
    return head + (": " + ", ".join(parts) if parts else "")


def load_range(loads: list[float] | None, basis: str | None) -> str:
    """ "batch 65-128", "concurrency 7.5-8.4", "running requests 30": a range of loads named
    as its basis measures them."""
    if not loads:
        return "unknown loads"
    noun = LOAD_NOUNS.get(basis or "rounds", "batch")

    def shown(v: float) -> str:
        return f"{v:g}" if basis == "tpot" else f"{round(v):d}"

    low, high = loads
    return f"{noun} {shown(low)}" if shown(low) == shown(high) else f"{noun} {shown(low)}-{shown(high)}"
