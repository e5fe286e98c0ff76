"""The four deployment gates of the seed (8.2): correctness, quality, latency and
capacity (docs/commands.md, "Gates").

    >>> from analyzer import api, gates
    >>> from analyzer.config import load_config
    >>> ws = api.open_traces("sample_traces/")
    >>> results = gates.evaluate_gates(ws.con, load_config(None))
    >>> gates.any_failed(results)

The values come from the view ``gate_inputs`` (sql/marts/gate_inputs.sql);
this module only compares them with the thresholds of the config.

Result shape, one entry per (deployment, gate)::

    {"deployment_id", "gate", "status", "reason",
     "checks": [{"name", "value", "threshold", "status", "reason"}]}

- status is ``pass``, ``fail`` or ``unknown``. A check is unknown when its value
  is null; the data it needs is missing. A gate fails when any check fails, is
  otherwise unknown when any check is unknown, and passes only when every check
  passes: unknown is never reported as pass.
- ``reason`` (check) says why an unknown check is unknown, and is null otherwise.
  ``reason`` (gate) joins the reasons of its unknown checks, or is null.
- Order: deployments by id; gates correctness, quality, latency, capacity. A
  baseline (method ``none``) gets only latency and capacity, and its capacity
  gate has no min_speedup check.
- Thresholds are inclusive (value ≥ a minimum, value ≤ a maximum). A value that
  equals the threshold up to floating-point rounding (relative 1e-9) passes, so
  that 0.25 − 0.24 (0.010000000000000009) does not fail a 0.01 limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import duckdb

from .config import Config

GATES = ("correctness", "quality", "latency", "capacity")
BASELINE_GATES = ("latency", "capacity")

PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"

# check name -> (comparison, the threshold's key under [gates])
AT_LEAST, AT_MOST = ">=", "<="
CHECKS: dict[str, tuple[str, str]] = {
    "match_rate": (AT_LEAST, "correctness.min_match_rate"),
    "quality_drop": (AT_MOST, "quality.max_quality_drop"),
    "ttft_p99_ms": (AT_MOST, "latency.ttft_p99_ms"),
    "tpot_p95_ms": (AT_MOST, "latency.tpot_p95_ms"),
    "max_stall_p99_ms": (AT_MOST, "latency.max_stall_p99_ms"),
    "speedup": (AT_LEAST, "capacity.min_speedup"),
    "preemptions_per_request": (AT_MOST, "capacity.max_preemptions_per_request"),
}

_REL_TOL = 1e-9


def evaluate_gates(con: duckdb.DuckDBPyConnection, config: Config | None = None) -> list[dict]:
    """Every deployment's gates, in the shape described in the module docstring."""
    config = config or Config()
    present = _Presence(con)
    result = con.execute("select * from gate_inputs order by deployment_id")
    names = [d[0] for d in result.description]
    out: list[dict] = []
    for values in result.fetchall():
        row = dict(zip(names, values))
        baseline = row["method"] == "none"
        for gate in (BASELINE_GATES if baseline else GATES):
            checks = _BUILDERS[gate](row, config, present, baseline)
            out.append(_gate(row["deployment_id"], gate, checks))
    return out


def any_failed(gates: list[dict]) -> bool:
    """True when some gate failed (``report --check`` and ``nightly`` exit 1)."""
    return any(g["status"] == FAIL for g in gates)


# --------------------------------------------------------------------------- checks


class _Presence:
    """Which optional tables and columns the input had at all (trace_tables, trace_columns)."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self.tables = dict(con.execute("select table_name, present from trace_tables").fetchall())
        self.columns = {(t, c): p for t, c, p in con.execute(
            "select table_name, column_name, present from trace_columns").fetchall()}

    def table(self, table: str) -> bool:
        return bool(self.tables.get(table))

    def column(self, table: str, column: str) -> bool:
        return bool(self.columns.get((table, column)))

    def requests_missing(self, column: str | None = None) -> str | None:
        """Why a requests column can't be used at all, or None when it can."""
        if not self.table("requests"):
            return "the requests table is absent"
        if column and not self.column("requests", column):
            return f"{column} is absent from every requests file"
        return None


def _threshold(config: Config, name: str) -> float:
    section, key = CHECKS[name][1].split(".")
    return getattr(getattr(config.gates, section), key)


def _check(name: str, value: Any, config: Config, reason: str | None) -> dict:
    threshold = _threshold(config, name)
    if value is None:
        return {"name": name, "value": None, "threshold": threshold, "status": UNKNOWN,
                "reason": reason or f"{name} is unknown"}
    value = float(value)
    close = math.isclose(value, threshold, rel_tol=_REL_TOL, abs_tol=1e-12)
    ok = close or (value >= threshold if CHECKS[name][0] == AT_LEAST else value <= threshold)
    return {"name": name, "value": value, "threshold": threshold, "status": PASS if ok else FAIL,
            "reason": None}


def _gate(deployment_id: str, gate: str, checks: list[dict]) -> dict:
    statuses = {c["status"] for c in checks}
    status = FAIL if FAIL in statuses else UNKNOWN if (UNKNOWN in statuses or not checks) else PASS
    reasons = [f"{c['name']}: {c['reason']}" for c in checks if c["status"] == UNKNOWN]
    return {"deployment_id": deployment_id, "gate": gate, "status": status,
            "reason": "; ".join(reasons) or None, "checks": checks}


def _correctness(row: dict, config: Config, present: _Presence, baseline: bool) -> list[dict]:
    reason = (present.requests_missing("matches_reference")
              or ("no clean request of this deployment" if not row["num_requests"] else None)
              or ("matches_reference is null for every request of this deployment"
                  if not row["matches_checked"] else None))
    return [_check("match_rate", row["match_rate"], config, reason)]


def _quality(row: dict, config: Config, present: _Presence, baseline: bool) -> list[dict]:
    base = row["baseline_id"]
    reason = (present.requests_missing("quality_score")
              or (f"no matched baseline ({row['baseline_note'] or 'none found'})" if base is None else None)
              or ("quality_score is null for every request of this deployment"
                  if row["quality_mean"] is None else None)
              or (f"baseline {base} has no request with a quality_score"
                  if row["baseline_quality_mean"] is None else None))
    return [_check("quality_drop", row["quality_drop"], config, reason)]


def _latency(row: dict, config: Config, present: _Presence, baseline: bool) -> list[dict]:
    def why(metric: str, needs: str | None) -> str | None:
        missing = present.requests_missing(needs)
        if missing:
            return missing
        if metric == "max_stall" and not present.table("steps"):
            return "the steps table is absent, so streaming gaps have no times"
        if not row["num_requests"]:
            return "no clean request of this deployment"
        return {
            "ttft": "no request of this deployment has both arrival and first-token times",
            "tpot": "no request of this deployment has output_tokens > 1 and known first-token and finish times",
            "max_stall": "no request of this deployment has a streaming gap with known times",
        }[metric]

    return [
        _check("ttft_p99_ms", row["ttft_p99_ms"], config, why("ttft", "first_token_time")),
        _check("tpot_p95_ms", row["tpot_p95_ms"], config, why("tpot", "first_token_time")),
        _check("max_stall_p99_ms", row["max_stall_p99_ms"], config, why("max_stall", None)),
    ]


def _capacity(row: dict, config: Config, present: _Presence, baseline: bool) -> list[dict]:
    checks = []
    if not baseline:
        checks.append(_check("speedup", row["speedup"], config, row["speedup_note"]))
    reason = (present.requests_missing("num_preemptions")
              or ("no clean request of this deployment" if not row["num_requests"] else None))
    checks.append(_check("preemptions_per_request", row["preemptions_per_request"], config, reason))
    return checks


_BUILDERS: dict[str, Callable[[dict, Config, _Presence, bool], list[dict]]] = {
    "correctness": _correctness,
    "quality": _quality,
    "latency": _latency,
    "capacity": _capacity,
}
