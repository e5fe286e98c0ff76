"""What a speculative deployment's speedup rests on: the number the verdict decides with.

``speedup_evidence(doc)`` reads the report document and returns, per speculative
deployment, the one speedup the capacity gate and the verdict use (docs/metrics.md,
"The verdict")::

    {"basis", "speedup", "interval", "coverage", "num_requests", "baseline_id",
     "baseline_num_requests", "reason"}

``basis`` says what the speedup rests on, the first that applies:

- ``rounds``: the deployment has rounds with clean steps, so the throughput-weighted
  speedup matched on batch size (``speedup``, its bootstrap interval and
  ``speedup_coverage``) decides, even where it is null (then nothing else stands in:
  a TPOT ratio is no substitute for a missing baseline at the batch sizes it ran);
- ``tpot``: no steps, but request timings on both sides: ``tpot_speedup``, not matched
  on batch size, with its interval over requests (response-only imports);
- ``logs``: only engine log intervals: the speedup from both sides' logged generation
  throughput per running-request bucket (``log_speedup``), standing even where it is
  null (no baseline log, or too few lines per bucket);
- ``None``: nothing to decide with; ``reason`` says why.
"""

from __future__ import annotations

from typing import Any

BASES = ("rounds", "tpot", "logs")

# Where each basis's numbers are in a deployment entry of the report document.
_KEYS = {
    "rounds": ("speedup", "speedup_interval", "speedup_coverage"),
    "tpot": ("tpot_speedup", "tpot_speedup_interval", "tpot_speedup_coverage"),
    "logs": ("log_speedup", "log_speedup_interval", "log_speedup_coverage"),
}


def basis_of(d: dict[str, Any], logged: set[str] = frozenset()) -> str | None:
    """The basis of one deployment entry (see the module docstring); ``logged``: the
    deployments with log intervals. A deployment known only from its logs is judged by
    them even when their speedup is null (too few lines, or no baseline log)."""
    if (d.get("round_ms") or {}).get("mean") is not None:
        return "rounds"
    if d.get("tpot_speedup") is not None:
        return "tpot"
    if d.get("log_speedup") is not None or d["deployment_id"] in logged:
        return "logs"
    return None


def speedup_evidence(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per speculative deployment id, the speedup it is judged by (module docstring)."""
    requests = {d["deployment_id"]: d.get("num_requests") for d in doc["deployments"]}
    logged = {r["deployment_id"] for r in doc.get("intervals") or []}
    out: dict[str, dict[str, Any]] = {}
    for d in doc["deployments"]:
        if d["method"] == "none":
            continue
        basis = basis_of(d, logged)
        value = interval = coverage = None
        if basis is not None:
            value_key, interval_key, coverage_key = _KEYS[basis]
            value, interval, coverage = d.get(value_key), d.get(interval_key), d.get(coverage_key)
        # a logs speedup resamples log intervals, not requests; a TPOT speedup counts the
        # requests with both times
        by_requests = basis != "logs"
        own = d.get("tpot_speedup_requests") if basis == "tpot" else requests.get(d["deployment_id"])
        out[d["deployment_id"]] = {
            "basis": basis, "speedup": value, "interval": interval, "coverage": coverage,
            "num_requests": own if by_requests else None,
            "baseline_id": d.get("baseline_id"),
            "baseline_num_requests": requests.get(d.get("baseline_id")) if by_requests else None,
            "reason": None if value is not None else _why_unknown(d, basis, logged),
        }
    return out


def _why_unknown(d: dict[str, Any], basis: str | None, logged: set[str]) -> str:
    """Why a deployment has no speedup to decide with, in words a note can carry."""
    if d.get("baseline_id") is None:
        return d.get("speedup_note") or "no matched baseline"
    if basis == "rounds":
        return d.get("speedup_note") or "the speedup is unknown"
    if basis == "logs":
        if d.get("baseline_id") not in logged:
            return (f"its baseline {d['baseline_id']} has no log intervals: the speedup from logs compares both "
                    "sides' logged generation throughput")
        return (d.get("log_speedup_evidence") or {}).get("note") or "the speedup from logs is unknown"
    return "no steps, and no request timings or log intervals on both sides"
