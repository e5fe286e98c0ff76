"""The "Deployment gates" section of the report."""

from __future__ import annotations

from typing import Any

from ..analysis.gates import AT_LEAST, AT_MOST, CHECKS, GATES, PASS
from .markdown import DASH, num, pct, table


def render_gates_markdown(gates: list[dict]) -> str:
    """The "Deployment gates" section: deployment × gate status, then the checks of
    every gate that failed or is unknown. Empty when there are no gates."""
    if not gates:
        return ""
    shown = {"match_rate": lambda v: pct(v, 2), "quality_drop": lambda v: num(v, 4),
             "speedup": lambda v: num(v, 3), "preemptions_per_request": lambda v: num(v, 3)}

    def fmt(name: str, value: Any) -> str:
        return shown.get(name, lambda v: num(v, 1))(value)

    by_deployment: dict[str, dict[str, str]] = {}
    for g in gates:
        by_deployment.setdefault(g["deployment_id"], {})[g["gate"]] = g["status"].upper()
    overview = table(["deployment", *GATES],
                     [(dep, *(cells.get(gate, DASH) for gate in GATES)) for dep, cells in by_deployment.items()])

    details = []
    for g in gates:
        if g["status"] == PASS:
            continue
        for c in g["checks"]:
            op = "≥" if CHECKS.get(c["name"], (AT_MOST,))[0] == AT_LEAST else "≤"
            details.append((g["deployment_id"], g["gate"], c["name"], fmt(c["name"], c["value"]),
                            f"{op} {fmt(c['name'], c['threshold'])}", c["status"].upper(),
                            c.get("reason") or ""))

    parts = ["## Deployment gates\n\n"
             "The deployment gates, checked before deploying. Each is PASS, FAIL or UNKNOWN; UNKNOWN means the data "
             "it needs is missing, and it is never counted as a pass. A baseline (`none`) deployment is "
             f"gated on latency and capacity only, without min_speedup ({DASH} marks a gate not applied).\n\n",
             overview]
    if details:
        headers = ["deployment", "gate", "check", "value", "threshold", "status", "reason"]
        if not any(row[-1] for row in details):
            headers, details = headers[:-1], [row[:-1] for row in details]
        parts += ["\nChecks of the gates that failed or are unknown:\n\n", table(headers, details)]
    return "".join(parts)
