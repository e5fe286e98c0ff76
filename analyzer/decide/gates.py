"""The four deployment gates of the seed (8.2): correctness, quality, latency and
capacity (docs/commands.md, "Gates").

    >>> from analyzer import api
    >>> from analyzer.analysis.config import load_config
    >>> from analyzer.decide.gates import evaluate_gates, blocking_checks
    >>> with api.open_traces("sample_traces/") as ws:
    ...     results = evaluate_gates(ws.con, load_config(None))
    >>> sorted({g["gate"] for g in results})
    ['capacity', 'correctness', 'latency', 'quality']
    >>> [(c["name"], c["status"]) for g in results if (g["deployment_id"], g["gate"]) == ("ngram-bf16", "latency")
    ...  for c in g["checks"]]
    [('ttft_p99_ms', 'unknown'), ('tpot_p95_ms', 'pass'), ('max_stall_p99_ms', 'shared')]

The values come from the view ``gate_inputs`` (sql/marts/gate_inputs.sql), the
latency percentiles' intervals and the baseline's percentiles at the same load from
``analysis.latency_intervals``, and, for the capacity gate's speedup, from the speedup
the verdict decides with (``evidence.speedup_evidence``); this module compares them
with the thresholds of the config.

Result shape, one entry per (deployment, gate)::

    {"deployment_id", "gate", "status", "reason",
     "checks": [{"name", "value", "threshold", "baseline_value", "status", "reason", ...}]}

- A check's status is ``pass``, ``fail``, ``shared`` or ``unknown``. A check is
  unknown when its value is null (the data it needs is missing, ``reason`` says
  which), and when the evidence can't tell (below).
- **Latency checks** (TTFT p99, TPOT p95, max stall p99) are judged against their
  target, the threshold, by the percentile's 95 % ``interval`` (``_latency_check``):
  inside it passes, whatever its ratio to the baseline (a large rise inside is a
  ``finding``); across it is unknown. Past it, a speculative deployment's check is
  compared with its baseline at the same load (``baseline_value``,
  ``baseline_interval``: the baseline's percentile reweighted to the deployment's load
  cells; ``ratio``, ``ratio_interval``): it fails (blocks) when the baseline meets the
  target there or the ratio lies above 1 + ``max_worsening`` by its interval, is
  shared when both miss within the tolerance, and unknown otherwise, including when
  the two ran at different loads (``matched_share`` below ``min_speedup_coverage``:
  never "speculation's doing"). Below ``[evidence] min_requests`` requests on either
  side it is unknown (a p99 of five requests is their maximum, no service level).
- **failed_share** (correctness, speculative deployments): requests that ended in
  ``error`` or ``abort``, as a share; its ``threshold`` is the tolerated rise over the
  baseline's share (``max_failed_share_rise``), and ``rise_interval`` bounds the rise
  (``share_difference``): it fails when the lower bound exceeds the tolerance (a rise
  shown at 95 %), passes when the upper bound is within it, and is unknown otherwise or
  below ``[evidence] min_requests`` requests on either side.
- **speedup** (capacity, speculative deployments): the speedup the verdict decides
  with, on its ``basis`` (rounds, tpot or logs), with its 95 % ``interval`` and
  ``coverage``. It is unknown below ``[evidence] min_requests`` of the deployment's
  requests and when it is not matched on context. It fails when the interval's upper
  bound is below ``min_speedup``; passes when the lower bound is above it and the
  coverage is at least ``min_speedup_coverage``; is unknown otherwise (the data can't
  tell, or covers too little), with the reason.
- A gate fails when any check fails; else it is unknown when any check is unknown;
  else shared when any check is shared; it passes only when every check passes:
  unknown is never reported as pass.
- ``reason`` (check) says why an unknown, shared or failed check is so; null for a
  pass. ``reason`` (gate) joins the reasons of its unknown checks, or is null.
- Order: deployments by id; gates correctness, quality, latency, capacity. A
  baseline (method ``none``) gets only latency and capacity, each check against its
  target alone, and its capacity gate has no speedup check. A baseline's failed
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
from ..analysis.latency_intervals import histograms, percentile_intervals
from ..analysis.uncertainty import clopper_pearson

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
    inputs = [dict(zip(names, values)) for values in result.fetchall()]
    latency = percentile_intervals(histograms(con), {r["deployment_id"]: r["baseline_id"] for r in inputs},
                                   seed=config.intervals.seed, replicates=config.intervals.latency_replicates)
    loads = {r[0]: r[1] for r in con.execute(
        "select deployment_id, load from tpot_speedup where load is not null").fetchall()}
    out: list[dict] = []
    for row in inputs:
        baseline = row["method"] == "none"
        row["latency"] = latency.get(row["deployment_id"], {})
        row["load"] = loads.get(row["deployment_id"])
        row["baseline_load"] = loads.get(row["baseline_id"])
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


def _span(interval: list[float] | None, unit: str = " ms") -> str:
    """An interval as a reason shows it: whole ms, or a ratio (``unit`` "") to two decimals."""
    if not interval:
        return "no interval"
    if unit:
        return f"[{interval[0]:,.0f}, {interval[1]:,.0f}]{unit}"
    return f"[{interval[0]:.2f}, {interval[1]:.2f}]"


def _latency_check(name: str, row: dict, config: Config, reason: str | None, baseline: bool) -> dict:
    """A latency check, judged against its target (docs/commands.md, "Gates"):

    - it passes when the percentile's 95 % interval lies inside the target, whatever its
      ratio to the baseline (a large rise inside the target is a ``finding``, no block);
    - it is unknown while the interval straddles the target, or below ``[evidence]
      min_requests`` requests;
    - a percentile whose interval lies past the target fails (blocks) when the baseline at
      the same load meets it (the baseline's matched percentile lies inside the target by
      its interval), or when the deployment is worse than the baseline at the same load by
      more than ``max_worsening`` (the ratio's interval lies above 1 + max_worsening); it is
      shared when the baseline misses it too and the ratio lies within the tolerance, and
      unknown otherwise: when the two ran at different loads (no matched cells for at least
      min_speedup_coverage of its requests), or the data can't tell.

    Without a matched baseline (and for a baseline itself) the target alone decides."""
    metric = name.split("_p")[0]
    value, n = row[name], row[f"{metric}_n"]
    info = (row.get("latency") or {}).get(name) or {}
    check = _check(name, value, config, reason)
    interval = info.get("interval")
    if interval and value is not None:
        # the exact percentile lies in its own interval, whatever the bins say
        interval = [min(interval[0], float(value)), max(interval[1], float(value))]
    check.update(n=n, interval=interval, baseline_n=None if baseline else row[f"baseline_{metric}_n"],
                 baseline_interval=info.get("baseline_matched_interval"), ratio=info.get("ratio"),
                 ratio_interval=info.get("ratio_interval"), matched_share=info.get("matched_share"),
                 load=row.get("load"), baseline_load=None if baseline else row.get("baseline_load"),
                 finding=None)
    if not baseline:
        check["baseline_value"] = info.get("baseline_matched")
        limit = config.gates.latency.worsening_limit(name)
        check["max_worsening"] = limit
        check["worsening"] = (info["ratio"] - 1) if info.get("ratio") is not None else None
    if check["status"] == UNKNOWN:
        return check
    floor = config.evidence.min_requests
    target = check["threshold"]
    interval = check["interval"]
    if n < floor:
        return _set(check, UNKNOWN, f"a percentile of {n:,} requests ({floor:,} needed, [evidence] min_requests)")
    if not interval:
        return _set(check, UNKNOWN, "no interval (too few blocks of requests to resample)")
    if _within(interval[1], target, AT_MOST):
        if not baseline and check["ratio_interval"] and not _within(
                check["ratio_interval"][0], 1 + check["max_worsening"], AT_MOST):
            check["finding"] = (f"{check['ratio']:.0%} of {row['baseline_id']}'s at the same load "
                                f"({_span(check['ratio_interval'], '')} as a ratio), inside the target")
        return _set(check, PASS, None)
    if not _clears(interval[0], target):
        return _set(check, UNKNOWN, f"its 95% interval {_span(interval)} includes the target ({target:,.0f} ms)")
    # the percentile misses its target, by its interval
    if baseline or row["baseline_id"] is None:
        return _set(check, FAIL, None if baseline else "misses the target; no matched baseline to compare with")
    base_id = row["baseline_id"]
    if check["baseline_n"] < floor:
        return _set(check, UNKNOWN, f"misses the target, but {base_id}'s percentile rests on "
                                    f"{check['baseline_n']:,} requests ({floor:,} needed, [evidence] min_requests)")
    share = check["matched_share"]
    if share is None or share < config.gates.capacity.min_speedup_coverage or check["baseline_value"] is None:
        loads = _loads_text(check, base_id)
        return _set(check, UNKNOWN, f"misses the target, but not matched on load: {loads}; the baseline's "
                                    "value at another load says nothing about speculation")
    b_int, r_int = check["baseline_interval"], check["ratio_interval"]
    limit = check["max_worsening"]
    if b_int and _within(b_int[1], target, AT_MOST):
        return _set(check, FAIL, f"misses the target, which {base_id} meets at the same load "
                                 f"({check['baseline_value']:,.0f} ms, {_span(b_int)})")
    if r_int and _clears(r_int[0], 1 + limit):
        return _set(check, FAIL, f"{check['ratio']:.2f}× {base_id}'s at the same load ({_span(r_int, '')}), "
                                 f"beyond the tolerance of {limit:.0%}")
    if b_int and _clears(b_int[0], target) and r_int and _within(r_int[1], 1 + limit, AT_MOST):
        return _set(check, SHARED, f"{base_id} misses it too at the same load ({check['baseline_value']:,.0f} ms, "
                                   f"{_span(b_int)}), within {limit:.0%}: the service level, not speculation")
    return _set(check, UNKNOWN, f"misses the target; at the same load {base_id} gives {check['baseline_value']:,.0f} "
                                f"ms ({_span(b_int)}) and the ratio {_span(r_int, '')} can't tell speculation's "
                                "share from the service level's")


def _loads_text(check: dict, base_id: str) -> str:
    if check.get("load") is not None and check.get("baseline_load") is not None:
        return (f"it ran at concurrency {float(check['load']):g} and {base_id} at {float(check['baseline_load']):g} "
                f"(medians; {0 if check['matched_share'] is None else check['matched_share']:.0%} of its requests "
                "at loads both ran)")
    return f"{0 if check['matched_share'] is None else check['matched_share']:.0%} of its requests ran at loads {base_id} ran"


def _set(check: dict, status: str, reason: str | None) -> dict:
    check.update(status=status, reason=reason)
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
    if ev.get("not_matched"):
        miss = ev["not_matched"][0]
        check.update(status=UNKNOWN, reason=(
            f"not matched on context: median prompts of {miss['prompt_tokens_median']:,.0f} tokens against "
            f"{miss['baseline_prompt_tokens_median']:,.0f} on {ev['baseline_id']}, and no context lengths to "
            "match the steps on"))
    elif requests is not None and requests < needed:
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
    rise = config.gates.correctness.max_failed_share_rise
    check = _check("failed_share", row["failed_share"] if known else None, config, failed_reason,
                   threshold=rise, baseline_value=row["baseline_failed_share"] if known else None)
    check.update(rise=None, rise_interval=None, n=row["num_requests"], baseline_n=row["baseline_num_requests"])
    if known:
        lo, hi = share_difference(row["failed_requests"], row["num_requests"], row["baseline_failed_requests"],
                                  row["baseline_num_requests"])
        check.update(rise=row["failed_share"] - row["baseline_failed_share"], rise_interval=[lo, hi],
                     n=row["num_requests"], baseline_n=row["baseline_num_requests"])
        if _clears(lo, rise):
            _set(check, FAIL, f"the share rose by {lo:.1%} at least (one-sided 95%), more than {rise:.1%}")
        elif _within(hi, rise, AT_MOST):
            _set(check, PASS, None)
        else:
            _set(check, UNKNOWN, f"the rise over {row['baseline_id']}'s share lies in [{lo:+.1%}, {hi:+.1%}] "
                                 f"(90%): it can't tell a rise of more than {rise:.1%} from noise")
    checks.append(check)
    return checks


def share_difference(x1: int, n1: int, x2: int, n2: int, alpha: float = 0.05) -> tuple[float, float]:
    """Bounds of the rise p1 − p2 of two shares, each one-sided 1 − alpha: Newcombe's
    square-and-add (MOVER) combination of each share's exact Clopper–Pearson bounds,

        lower = p1 − p2 − √((p1 − l1)² + (u2 − p2)²),  upper = p1 − p2 + √((u1 − p1)² + (p2 − l2)²),

    so a lower bound above a tolerance shows a rise beyond it at 95 %. Exact bounds, not
    Wilson's: at a true rise of exactly the tolerance, 1 failed of 20 against 0 of 300 is
    blocked in 1.7 % of draws with them and in 18.8 % with Wilson's score bounds, whose
    lower bound at one or two events is too high; at 2,000 requests a side both block in
    about 4.5-5 % (docs/commands.md, "Gates")."""
    l1, u1 = clopper_pearson(x1, n1, alpha)
    l2, u2 = clopper_pearson(x2, n2, alpha)
    p1, p2 = x1 / n1, x2 / n2
    return (p1 - p2 - ((p1 - l1) ** 2 + (u2 - p2) ** 2) ** 0.5, p1 - p2 + ((u1 - p1) ** 2 + (p2 - l2) ** 2) ** 0.5)


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
