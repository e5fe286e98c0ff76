"""What to do with each deployment, in one line: the first thing the report says.

``verdicts(doc)`` reads the finished report document (gates, speedup, the
recommendation of section 13) and returns, per deployment, in the order of
``doc["deployments"]``::

    {"deployment_id", "action", "text"}

action is one of:

- ``dont_ship``: a gate fails (each failing check is named with its value and
  threshold: "TTFT p99 4,352 ms > 2,000"), or the measured speedup is not above 1;
- ``cap``: ship, with speculation switched off above a batch size (the
  recommended ranges end with k = 0): the config line is in the text;
- ``ship``: ship, with the recommended config line (or as configured when there
  is no recommendation);
- ``unknown``: the speedup is unknown, so there is nothing to decide on;
- ``baseline``: plain decoding, the reference of the others; its line says only
  which gates it fails, since a gate that the baseline fails as well points at the
  threshold rather than at speculation.

Unknown gates never count as passes: a ship or cap line names them.
"""

from __future__ import annotations

import json
from typing import Any

from .precision import with_interval

# How a check reads in a sentence: its label, and how its value is written.
CHECK_LABELS: dict[str, tuple[str, str]] = {
    "match_rate": ("match rate", "pct"),
    "quality_drop": ("quality drop", "4"),
    "ttft_p99_ms": ("TTFT p99", "ms"),
    "tpot_p95_ms": ("TPOT p95", "ms"),
    "max_stall_p99_ms": ("max stall p99", "ms"),
    "speedup": ("speedup", "3"),
    "preemptions_per_request": ("preemptions per request", "3"),
}
AT_LEAST_CHECKS = {"match_rate", "speedup"}


def _number(kind: str, value: float, *, unit: bool) -> str:
    """A check's value (``unit``: with "ms") or its threshold, as a sentence writes it."""
    if kind == "pct":
        return f"{value:.1%}"
    if kind == "ms":
        return f"{value:,.0f} ms" if unit else f"{value:,.0f}"
    return f"{value:.{int(kind)}f}" if unit else f"{value:g}"


def failed_check_text(check: dict[str, Any]) -> str:
    """ "TTFT p99 4,352 ms > 2,000" for a failed check."""
    label, kind = CHECK_LABELS.get(check["name"], (check["name"], "3"))
    op = "<" if check["name"] in AT_LEAST_CHECKS else ">"
    return f"{label} {_number(kind, check['value'], unit=True)} {op} {_number(kind, check['threshold'], unit=False)}"


def _failed(gates: list[dict], deployment_id: str) -> dict[str, list[str]]:
    """Per failed gate of the deployment, its failed checks as text."""
    return {g["gate"]: [failed_check_text(c) for c in g["checks"] if c["status"] == "fail"]
            for g in gates if g["deployment_id"] == deployment_id and g["status"] == "fail"}


def _unknown(gates: list[dict], deployment_id: str) -> list[str]:
    return [g["gate"] for g in gates if g["deployment_id"] == deployment_id and g["status"] == "unknown"]


def _gate_clause(failed: dict[str, list[str]]) -> str:
    return "; ".join(f"the {gate} gate fails ({', '.join(checks)})" for gate, checks in failed.items())


def _config(ranges: list[list[int]]) -> str:
    return f'`"num_speculative_tokens_per_batch_size": {json.dumps(ranges)}`'


def verdicts(doc: dict[str, Any], shown_speedup=None) -> list[dict[str, Any]]:
    """One verdict per deployment (see the module docstring). ``shown_speedup(deployment)``
    writes a deployment's speedup; by default to the decimals its 95 % interval supports,
    with the interval."""
    gates = doc.get("gates") or []
    recommendations = {r["deployment_id"]: r for r in (doc.get("tuning") or {}).get("recommendations") or []}
    show = shown_speedup or (lambda d: with_interval(d["speedup"], *(d.get("speedup_interval") or (None, None)),
                                                     suffix="×"))
    out = []
    for d in doc["deployments"]:
        dep = d["deployment_id"]
        failed = _failed(gates, dep)
        if d["method"] == "none":
            text = (f"{dep} is plain decoding, the baseline of the others"
                    + (f", and {_gate_clause(failed)}" if failed else "") + ".")
            out.append({"deployment_id": dep, "action": "baseline", "text": text})
            continue
        baseline_failed = _failed(gates, d["baseline_id"]) if d.get("baseline_id") else {}
        if failed:
            text = f"Don't ship {dep}: {_gate_clause(failed)}."
            shared = [gate for gate in failed if gate in baseline_failed]
            if shared:
                text += (f" Its baseline {d['baseline_id']} fails the {' and '.join(shared)} gate"
                         f"{'s' if len(shared) > 1 else ''} too: compare with the baseline's values before "
                         "blaming speculation.")
            rec = recommendations.get(dep) or {}
            ranges = rec.get("num_speculative_tokens_per_batch_size") or []
            if d["speedup"] is not None and d["speedup"] > 1 and any(k > 0 for _, _, k in ranges):
                text += (f" Otherwise it pays ({show(d)} the throughput of {d['baseline_id']}), with "
                         f"{_config(ranges)}.")
            action = "dont_ship"
        elif d["speedup"] is None:
            text, action = f"No verdict for {dep}: its speedup is unknown (see the notes).", "unknown"
        elif d["speedup"] <= 1:
            text = (f"Don't ship {dep}: {show(d)} the throughput of {d['baseline_id']}, no faster than plain "
                    "decoding.")
            action = "dont_ship"
        else:
            rec = recommendations.get(dep) or {}
            ranges = rec.get("num_speculative_tokens_per_batch_size") or []
            gain = f"{show(d)} the throughput of {d['baseline_id']}"
            if ranges and ranges[-1][2] == 0 and any(k > 0 for _, _, k in ranges):
                cap = max(end for _, end, k in ranges if k > 0)
                text = f"Ship {dep} with speculation capped at batch {cap}: {_config(ranges)} ({gain})."
                action = "cap"
            elif ranges and all(k == 0 for _, _, k in ranges):
                text = (f"Don't ship {dep}: no batch size is predicted to gain from speculation, though it "
                        f"measured {gain}; see section 13.")
                action = "dont_ship"
            elif ranges:
                text, action = f"Ship {dep} with {_config(ranges)} ({gain}).", "ship"
            else:
                text = (f"Ship {dep} as configured (num_speculative_tokens {d['num_speculative_tokens']}): {gain}; "
                        "no per-batch recommendation (see section 13).")
                action = "ship"
            unknown = _unknown(gates, dep)
            if unknown:
                text += f" Not checked: the {', '.join(unknown)} gate{'s' if len(unknown) > 1 else ''} (data missing)."
        out.append({"deployment_id": dep, "action": action, "text": text})
    return out


def shared_gate_failures(doc: dict[str, Any]) -> list[str]:
    """The gates that every deployment, baselines included, fails."""
    gates = doc.get("gates") or []
    deployments = {g["deployment_id"] for g in gates}
    if not deployments:
        return []
    names = []
    for gate in dict.fromkeys(g["gate"] for g in gates):
        applied = [g for g in gates if g["gate"] == gate]
        if len({g["deployment_id"] for g in applied}) == len(deployments) and all(
                g["status"] == "fail" for g in applied):
            names.append(gate)
    return names
