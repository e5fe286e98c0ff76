"""The "Deployment gates" section of the report."""

from __future__ import annotations

from typing import Any

from ..decide.gates import AT_LEAST, AT_MOST, CHECKS, GATES, PASS
from .cells import DASH, num, pct, table


def check_value(name: str, value: Any) -> str:
    """A check's value (or threshold) as the gates table writes it."""
    shown = {"match_rate": lambda v: pct(v, 2), "failed_share": lambda v: pct(v, 1),
             "quality_drop": lambda v: num(v, 4), "speedup": lambda v: num(v, 3),
             "preemptions_per_request": lambda v: num(v, 3)}
    return shown.get(name, lambda v: num(v, 1))(value)


def _threshold(check: dict) -> str:
    op = "≥" if CHECKS.get(check["name"], (AT_MOST,))[0] == AT_LEAST else "≤"
    text = f"{op} {check_value(check['name'], check['threshold'])}"
    if check.get("max_worsening") is not None and check.get("baseline_value") is not None:
        text += f"; ≤ baseline +{check['max_worsening']:.0%}"
    if check["name"] == "speedup" and check.get("min_coverage") is not None:
        text += f" (lower bound), coverage ≥ {check['min_coverage']:.0%}"
    return text


def _value(check: dict) -> str:
    text = check_value(check["name"], check["value"])
    interval = check.get("interval")
    if check["name"] == "speedup" and interval and None not in interval:
        text += f" [{num(interval[0], 3)}, {num(interval[1], 3)}]"
    return text


def render_gates_markdown(gates: list[dict]) -> str:
    """The "Deployment gates" section: deployment × gate status, then every check that
    fails, is shared with the baseline, or is unknown (never a pass). Empty when there
    are no gates."""
    if not gates:
        return ""
    by_deployment: dict[str, dict[str, str]] = {}
    for g in gates:
        by_deployment.setdefault(g["deployment_id"], {})[g["gate"]] = g["status"].upper()
    overview = table(["deployment", *GATES],
                     [(dep, *(cells.get(gate, DASH) for gate in GATES)) for dep, cells in by_deployment.items()])

    details = [(g["deployment_id"], g["gate"], c["name"], _value(c),
                DASH if c.get("baseline_value") is None else check_value(c["name"], c["baseline_value"]),
                _threshold(c), c["status"].upper(), c.get("reason") or "")
               for g in gates for c in g["checks"] if c["status"] != PASS]

    parts = ["## Deployment gates\n\n"
             "The deployment gates, checked before deploying. Each is PASS, FAIL, SHARED or UNKNOWN. A speculative "
             "deployment's latency checks are compared with its matched baseline's values as well as with the "
             "thresholds: FAIL (it blocks) when speculation makes a check worse than the baseline's by more than "
             "the tolerance, or misses a threshold the baseline meets; SHARED when both miss the threshold alike: a "
             "service-level problem that does not block. The speedup decides by its 95% interval: FAIL below "
             "min_speedup, PASS above it with enough coverage, UNKNOWN when the data can't tell. UNKNOWN means the "
             "data it needs is missing or does not decide, and it is never counted as a pass. A baseline (`none`) "
             f"deployment is gated on latency and capacity only, against the thresholds ({DASH} marks a gate not "
             "applied); what it misses blocks nothing.\n\n",
             overview]
    if details:
        headers = ["deployment", "gate", "check", "value", "baseline", "threshold", "status", "reason"]
        if not any(row[-1] for row in details):
            headers, details = headers[:-1], [row[:-1] for row in details]
        parts += ["\nChecks that fail, are shared with the baseline, or are unknown:\n\n", table(headers, details)]
    else:
        parts.append("\nEvery check passes.\n")
    return "".join(parts)
