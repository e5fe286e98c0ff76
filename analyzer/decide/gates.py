"""The four deployment gates of the seed (8.2): correctness, quality, latency and
capacity (docs/commands.md, "Gates").

    >>> from analyzer import api
    >>> from analyzer.analysis.config import load_config
    >>> from analyzer.decide.gates import evaluate_gates, blocking_checks
    >>> with api.open_traces("sample_traces/") as ws:
    ...     results = evaluate_gates(ws.con, load_config(None))
    >>> sorted({g["gate"] for g in results})
    ['capacity', 'correctness', 'latency', 'quality']
    >>> [(c["gate"], c["name"]) for c in blocking_checks(results, "eagle-bf16")]
    [('latency', 'max_stall_p99_ms')]

The values come from the view ``gate_inputs`` (sql/marts/gate_inputs.sql) and, for
the capacity gate's speedup, from the speedup the verdict decides with
(``evidence.speedup_evidence``); this module only compares them with the thresholds
of the config and with the matched baseline's values.

Result shape, one entry per (deployment, gate)::

    {"deployment_id", "gate", "status", "reason",
     "checks": [{"name", "value", "threshold", "baseline_value", "status", "reason", ...}]}

- A check's status is ``pass``, ``fail``, ``shared`` or ``unknown``. A check is
  unknown when its value is null (the data it needs is missing, ``reason`` says
  which) and, for the speedup, when its interval can't tell (below).
- **Latency checks of a speculative deployment** (TTFT p99, TPOT p95, max stall p99:
  every check of the latency gate) are compared with the matched baseline's value
  (``baseline_value``) as well as with the absolute threshold. The check **fails**
  (it blocks) when the value is worse than the baseline's by more than the tolerance
  ``[gates.latency] max_worsening`` (``<check>_max_worsening`` per check), or when it
  misses the threshold that the baseline meets. It is **shared** when it misses the
  threshold and the baseline misses it too, within the tolerance: a service-level
  problem that speculation does not cause, which does not block. Without a baseline
  value only the threshold decides. Extra keys: ``worsening`` (value ÷ baseline − 1),
  ``max_worsening``, and the requests behind each side's percentile, ``n`` and
  ``baseline_n``: below ``[evidence] min_requests`` on either side the check is
  unknown (a p99 of five requests is their maximum, no service level).
- **failed_share** (correctness, speculative deployments): requests that ended in
  ``error`` or ``abort``, as a share; it fails when it exceeds the baseline's share
  by more than ``max_failed_share_rise``, and its threshold is that limit (the
  baseline's share plus the rise); unknown below ``[evidence] min_requests`` requests
  on either side.
- **speedup** (capacity, speculative deployments): the speedup the verdict decides
  with, on its ``basis`` (rounds, tpot or logs), with its 95 % ``interval`` and
  ``coverage``. It is unknown below ``[evidence] min_requests`` of the deployment's
  requests (a bootstrap over a handful of requests says nothing). It fails when the
  interval's upper bound is below ``min_speedup``; passes when the lower bound is
  above it and the coverage is at least
  ``min_speedup_coverage``; is unknown otherwise (the data can't tell, or covers too
  little), with the reason.
- A gate fails when any check fails; else it is unknown when any check is unknown;
  else shared when any check is shared; it passes only when every check passes:
  unknown is never reported as pass.
- ``reason`` (check) says why an unknown or shared check is so, and why a latency
  check compared with its baseline fails; null otherwise. ``reason`` (gate) joins
  the reasons of its unknown checks, or is null.
- Order: deployments by id; gates correctness, quality, latency, capacity. A
  baseline (method ``none``) gets only latency and capacity, each check against its
  threshold alone, and its capacity gate has no speedup check. A baseline's failed
  checks block nothing: it is the reference, not a rollout (``blocking_checks``).
- Thresholds are inclusive (value ≥ a minimum, value ≤ a maximum). A value that
  equals the threshold up to floating-point rounding (relative 1e-9) passes, so
  that 0.25 − 0.24 (0.010000000000000009) does not fail a 0.01 limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import duckdb

from ..analysis.config import Config

GATES = ("correctness", "quality", "latency", "capacity")
BASELINE_GATES = ("latency", "capacity")

PASS, FAIL, SHARED, UNKNOWN = "pass", "fail", "shared", "unknown"

# check name -> (comparison, the threshold's key under [gates])
AT_LEAST, AT_MOST = ">=", "<="
CHECKS: dict[str, tuple[str, str]] = {
    "match_rate": (AT_LEAST, "correctness.min_match_rate"),
    "failed_share": (AT_MOST, "correctness.max_failed_share_rise"),
    "quality_drop": (AT_MOST, "quality.max_quality_drop"),
    "ttft_p99_ms": (AT_MOST, "latency.ttft_p99_ms"),
    "tpot_p95_ms": (AT_MOST, "latency.tpot_p95_ms"),
    "max_stall_p99_ms": (AT_MOST, "latency.max_stall_p99_ms"),
    "speedup": (AT_LEAST, "capacity.min_speedup"),
    "preemptions_per_request": (AT_MOST, "capacity.max_preemptions_per_request"),
}

_REL_TOL = 1e-9


def evaluate_gates(con: duckdb.DuckDBPyConnection, config: Config | None = None,
                   evidence: dict[str, dict] | None = None) -> list[dict]:
    """Every deployment's gates, in the shape described in the module docstring.

    ``evidence``: the speedup each speculative deployment is judged by
    (``evidence.speedup_evidence``); without it, the step-based speedup of
    ``gate_inputs`` with no interval, so its check is unknown."""
    config = config or Config()
    present = _Presence(con)
    result = con.execute("select * from gate_inputs order by deployment_id")
    names = [d[0] for d in result.description]
    out: list[dict] = []
    for values in result.fetchall():
        row = dict(zip(names, values))
        baseline = row["method"] == "none"
        if not baseline:
            row["evidence"] = (evidence or {}).get(row["deployment_id"]) or {
                "basis": "rounds", "speedup": row["speedup"], "interval": None, "coverage": None,
                "reason": row["speedup_note"]}
        for gate in (BASELINE_GATES if baseline else GATES):
            checks = _BUILDERS[gate](row, config, present, baseline)
            out.append(_gate(row["deployment_id"], gate, checks))
    return out


def blocking_checks(gates: list[dict], deployment_id: str) -> list[dict]:
    """The checks that block a speculative deployment: every failed one (with its gate)."""
    return [{"gate": g["gate"], **c} for g in gates if g["deployment_id"] == deployment_id
            for c in g["checks"] if c["status"] == FAIL]


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


def _within(value: float, threshold: float, comparison: str) -> bool:
    """value meets threshold (inclusive, up to floating-point rounding)."""
    if math.isclose(value, threshold, rel_tol=_REL_TOL, abs_tol=1e-12):
        return True
    return value >= threshold if comparison == AT_LEAST else value <= threshold


def _clears(value: float, minimum: float) -> bool:
    """value is above minimum, beyond floating-point rounding: a lower bound equal to it clears nothing."""
    return value > minimum and not math.isclose(value, minimum, rel_tol=_REL_TOL, abs_tol=1e-12)


def _check(name: str, value: Any, config: Config, reason: str | None, *, threshold: float | None = None,
           baseline_value: Any = None) -> dict:
    threshold = _threshold(config, name) if threshold is None else threshold
    baseline_value = None if baseline_value is None else float(baseline_value)
    if value is None:
        return {"name": name, "value": None, "threshold": threshold, "baseline_value": baseline_value,
                "status": UNKNOWN, "reason": reason or f"{name} is unknown"}
    value = float(value)
    ok = _within(value, threshold, CHECKS[name][0])
    return {"name": name, "value": value, "threshold": threshold, "baseline_value": baseline_value,
            "status": PASS if ok else FAIL, "reason": None}


def _latency_check(name: str, row: dict, config: Config, reason: str | None, baseline: bool) -> dict:
    """A latency check: the threshold, and for a speculative deployment its baseline's value
    too (module docstring). A percentile of fewer than ``[evidence] min_requests`` values,
    on either side, decides nothing: the check is unknown."""
    metric = name.split("_p")[0]
    value, n = row[name], row[f"{metric}_n"]
    base_value = None if baseline else row[f"baseline_{name}"]
    base_n = None if baseline else row[f"baseline_{metric}_n"]
    check = _check(name, value, config, reason, baseline_value=base_value)
    check["n"], check["baseline_n"] = n, base_n
    floor = config.evidence.min_requests
    if check["status"] != UNKNOWN and n < floor:
        check.update(status=UNKNOWN, reason=f"a percentile of {n:,} requests ({floor:,} needed, "
                                            "[evidence] min_requests)")
    elif check["status"] != UNKNOWN and base_value is not None and base_n < floor:
        check.update(status=UNKNOWN, reason=f"the baseline's percentile rests on {base_n:,} requests ({floor:,} "
                                            "needed, [evidence] min_requests)")
    if baseline:
        return check
    limit = config.gates.latency.worsening_limit(name)
    check["max_worsening"] = limit
    check["worsening"] = None
    base = check["baseline_value"]
    if check["status"] == UNKNOWN or base is None or base <= 0:
        return check
    check["worsening"] = check["value"] / base - 1
    if not _within(check["value"], base * (1 + limit), AT_MOST):
        check.update(status=FAIL, reason=f"{check['worsening']:+.0%} on the baseline's value (tolerance "
                                         f"{limit:.0%}): speculation's own doing")
    elif check["status"] == FAIL and not _within(base, check["threshold"], AT_MOST):
        check.update(status=SHARED, reason=f"the baseline misses it too ({check['worsening']:+.0%}, within "
                                          f"{limit:.0%}): the service level, not speculation")
    elif check["status"] == FAIL:
        check["reason"] = "misses the threshold that the baseline meets"
    return check


def _speedup_check(row: dict, config: Config) -> dict:
    """The capacity gate's speedup: decided by its interval and coverage (module docstring)."""
    ev = row["evidence"]
    gate = config.gates.capacity
    check = _check("speedup", ev["speedup"], config, ev.get("reason"))
    check.update(basis=ev.get("basis"), interval=ev.get("interval"), coverage=ev.get("coverage"),
                 min_coverage=gate.min_speedup_coverage)
    if check["status"] == UNKNOWN:
        return check
    interval, coverage = ev.get("interval"), ev.get("coverage")
    requests, needed = ev.get("num_requests"), config.evidence.min_requests
    if requests is not None and requests < needed:
        check.update(status=UNKNOWN, reason=f"it rests on {requests:,} of the deployment's requests "
                                            f"({needed:,} needed, [evidence] min_requests)")
    elif interval is None or None in interval:
        check.update(status=UNKNOWN, reason="no 95% interval (too few requests to resample): the point "
                                            "estimate alone does not decide")
    elif not _within(interval[1], gate.min_speedup, AT_LEAST):
        check.update(status=FAIL, reason=None)
    elif _clears(interval[0], gate.min_speedup) and coverage is not None \
            and _within(coverage, gate.min_speedup_coverage, AT_LEAST):
        check.update(status=PASS, reason=None)
    elif _clears(interval[0], gate.min_speedup):
        share = "unknown" if coverage is None else f"{coverage:.1%}"
        check.update(status=UNKNOWN, reason=f"it covers {share} of the deployment's committed tokens, "
                                            f"below min_speedup_coverage ({gate.min_speedup_coverage:.0%})")
    else:
        check.update(status=UNKNOWN, reason=f"its 95% interval [{interval[0]:.3g}, {interval[1]:.3g}] includes "
                                            f"min_speedup ({gate.min_speedup:g}): the data can't tell")
    return check


def _gate(deployment_id: str, gate: str, checks: list[dict]) -> dict:
    statuses = {c["status"] for c in checks}
    status = (FAIL if FAIL in statuses else UNKNOWN if (UNKNOWN in statuses or not checks)
              else SHARED if SHARED in statuses else PASS)
    reasons = [f"{c['name']}: {c['reason']}" for c in checks if c["status"] == UNKNOWN]
    return {"deployment_id": deployment_id, "gate": gate, "status": status,
            "reason": "; ".join(reasons) or None, "checks": checks}


def _correctness(row: dict, config: Config, present: _Presence, baseline: bool) -> list[dict]:
    reason = (present.requests_missing("matches_reference")
              or ("no clean request of this deployment" if not row["num_requests"] else None)
              or ("matches_reference is null for every request of this deployment"
                  if not row["matches_checked"] else None))
    checks = [_check("match_rate", row["match_rate"], config, reason)]
    base = row["baseline_id"]
    failed_reason = (present.requests_missing()
                     or ("no clean request of this deployment" if not row["num_requests"] else None)
                     or (f"no matched baseline ({row['baseline_note'] or 'none found'})" if base is None else None)
                     or (f"baseline {base} has no clean request" if not row["baseline_num_requests"] else None)
                     or _too_few(row["num_requests"], row["baseline_num_requests"], config))
    known = failed_reason is None
    limit = (row["baseline_failed_share"] + config.gates.correctness.max_failed_share_rise) if known else \
        config.gates.correctness.max_failed_share_rise
    checks.append(_check("failed_share", row["failed_share"] if known else None, config, failed_reason,
                         threshold=limit, baseline_value=row["baseline_failed_share"] if known else None))
    return checks


def _too_few(n: int, baseline_n: int, config: Config) -> str | None:
    """Why a share of too few requests, on either side, decides nothing; None when both have enough."""
    floor = config.evidence.min_requests
    if n < floor or baseline_n < floor:
        return (f"a share of {min(n, baseline_n):,} requests ({floor:,} needed on both sides, "
                "[evidence] min_requests)")
    return None


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
        _latency_check("ttft_p99_ms", row, config, why("ttft", "first_token_time"), baseline),
        _latency_check("tpot_p95_ms", row, config, why("tpot", "first_token_time"), baseline),
        _latency_check("max_stall_p99_ms", row, config, why("max_stall", None), baseline),
    ]


def _capacity(row: dict, config: Config, present: _Presence, baseline: bool) -> list[dict]:
    checks = []
    if not baseline:
        checks.append(_speedup_check(row, config))
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
