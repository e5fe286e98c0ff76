"""What to do with each deployment, in one line: the first thing the report says.

``verdicts(doc, evidence, config)`` reads the finished report document (gates, the
recommendation of section 13 with its evidence-decided ranges) and the speedup each
speculative deployment is judged by (``evidence.speedup_evidence``: matched on load,
and context where it can be), and returns, per deployment, in the order of
``doc["deployments"]`` (docs/metrics.md, "The verdict")::

    {"deployment_id", "action", "basis", "config", "text", "speedup", "speedup_interval",
     "coverage", "config_speedup", "config_speedup_interval", "matched_on", "not_matched",
     "num_requests", "baseline_id", "baseline_num_requests",
     "blocking": [{"gate", "check", "value", "threshold", "baseline_value"}], "shared": [...],
     "not_checked": [check name, ...], "settle"}

action, decided in this order:

- ``dont_ship``: a check blocks (``blocking``, reasons in ``REASON_ORDER``: the speed
  first): a speedup whose 95 % interval lies below ``min_speedup``, a latency check past
  its target by its interval that the baseline meets at the same load or that is worse
  than the baseline there beyond the tolerance, a rise of failed requests shown at 95 %;
- ``inconclusive`` when the two sides never ran at comparable loads (both named);
- ``unknown``: there is no speedup to decide with; ``settle`` says which data would
  decide it, and the line says when the deployment's rounds come from fewer requests than
  ``[evidence] min_requests`` too ("not enough data: 1 request, floor 10"; a single request
  is below every floor);
- ``inconclusive``: the speedup check is unknown: its interval includes
  ``min_speedup``, it covers less than ``min_speedup_coverage`` of the tokens, rests on
  too few requests, or is not matched on context; ``settle`` names what would settle it
  (the short side and how many of its requests, or the baseline at the loads it ran);
- ``cap``: ship with speculation off in some batch ranges (where the range's own
  speedup lies below 1, or the baseline never ran there: "no baseline at batch 65-128:
  speculation off there until … is measured there"), quoting that config's speedup on
  the same steps (``config_speedup``); ``ship``: ship with the recommended ranges, or as
  configured when there are none; a config with k = 0 everywhere is ``dont_ship`` where
  some range loses, else ``inconclusive``. A method vLLM documents no per-batch config
  for (``tuning.per_batch_documented``: not eagle, eagle3 or dflash) is never offered
  one: it ships as configured, its single ``num_speculative_tokens`` (the length its
  speedup was measured at), and the line names the ranges as an option vLLM documents
  for EAGLE, EAGLE-3 and DFlash only; its ``config`` is null;
- ``baseline``: plain decoding, the reference of the others; nothing is shipped, so
  nothing blocks, and the checks it fails are listed under ``shared``: a service level
  that holds with or without speculation.

Checks left unknown are named in the line ("Undecided: …") and listed in
``not_checked``; none of them blocks, none is a pass. ``shared`` lists the checks that
miss their threshold on the deployment and on its baseline alike (within the
tolerance): stated once, as a finding about the pair (``shared_findings``), never as a
reason not to ship. ``config`` is the deployment's one config line: the same list as
``tuning.recommendations[].num_speculative_tokens_per_batch_size``, or null (none, or a
method offered its single length).
``check_failures`` is the rule of ``report --check`` and ``nightly``: a speculative
deployment passes only with ship or cap.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..analysis.config import Config
from ..analysis.tuning import DYNAMIC_SD_TESTED, per_batch_documented
from .gates import FAIL, SHARED, UNKNOWN, blocking_checks
from ..analysis.precision import with_interval
from .configs import no_baseline_buckets
from .evidence import load_range, ranges_meet, unmatched_text

# How a check reads in a sentence: its label, and how its value is written.
CHECK_LABELS: dict[str, tuple[str, str]] = {
    "match_rate": ("match rate", "pct"),
    "failed_share": ("failed requests", "pct"),
    "quality_drop": ("quality drop", "4"),
    "ttft_p99_ms": ("TTFT p99", "ms"),
    "tpot_p95_ms": ("TPOT p95", "ms"),
    "max_stall_p99_ms": ("max stall p99", "ms"),
    "speedup": ("speedup", "3"),
    "preemptions_per_request": ("preemptions per request", "3"),
}
AT_LEAST_CHECKS = {"match_rate", "speedup"}
# Beyond this many times the requests, "collect more" is no advice: the speedup sits at min_speedup.
MAX_SETTLE_FACTOR = 100


def _number(kind: str, value: float, *, unit: bool) -> str:
    """A check's value (``unit``: with "ms") or its threshold, as a sentence writes it."""
    if kind == "pct":
        return f"{value:.1%}"
    if kind == "ms":
        return f"{value:,.0f} ms" if unit else f"{value:,.0f}"
    return f"{value:.{int(kind)}f}" if unit else f"{value:g}"


def _label(name: str) -> tuple[str, str]:
    return CHECK_LABELS.get(name, (name, "3"))


def failed_check_text(check: dict[str, Any]) -> str:
    """ "TTFT p99 4,352 ms > 2,000" for a check that misses its threshold."""
    label, kind = _label(check["name"])
    op = "<" if check["name"] in AT_LEAST_CHECKS else ">"
    return f"{label} {_number(kind, check['value'], unit=True)} {op} {_number(kind, check['threshold'], unit=False)}"


def blocking_text(check: dict[str, Any], baseline_id: str | None) -> str:
    """Why one blocking check blocks, against the baseline where it was compared with it."""
    label, kind = _label(check["name"])
    if check["name"] == "failed_share" and check.get("rise_interval"):
        lo = check["rise_interval"][0]
        return (f"{label} {check['value']:.1%} vs {check['baseline_value']:.1%} on {baseline_id}: a rise of at "
                f"least {lo:.1%} (one-sided 95%), more than the {check['threshold']:.1%} tolerated")
    if check.get("interval") and check["name"] in LATENCY_CHECKS:
        shown = f"{label} {_number(kind, check['value'], unit=True)} [{check['interval'][0]:,.0f}, " \
                f"{check['interval'][1]:,.0f}] > {_number(kind, check['threshold'], unit=False)}"
        if check.get("reason"):
            return f"{shown}: {check['reason']}"
        return shown
    return failed_check_text(check)


LATENCY_CHECKS = ("ttft_p99_ms", "tpot_p95_ms", "max_stall_p99_ms")
# The order a verdict gives blocking reasons in: speed first, then latency, then the rest.
REASON_ORDER = ("speedup", "ttft_p99_ms", "tpot_p95_ms", "max_stall_p99_ms", "failed_share", "match_rate",
                "quality_drop", "preemptions_per_request")


def shared_text(check: dict[str, Any], deployments: list[tuple[str, float]], baseline_id: str) -> str:
    """ "TTFT p99 misses 2,000 ms with or without speculation: 3,898 vs 3,597 ms (eagle-dyn-bf16 vs
    base-bf16)"; with several deployments of one baseline, each one's value."""
    label, kind = _label(check["name"])
    unit = " ms" if kind == "ms" else ""

    def shown(v: float) -> str:
        return _number(kind, v, unit=False)

    head = f"{label} misses {shown(check['threshold'])}{unit} with or without speculation: "
    if len(deployments) == 1:
        dep, value = deployments[0]
        return f"{head}{shown(value)} vs {shown(check['baseline_value'])}{unit} ({dep} vs {baseline_id})"
    values = [f"{dep} {shown(value)}" for dep, value in deployments]
    return f"{head}{', '.join(values[:-1])} and {values[-1]} vs {baseline_id} {shown(check['baseline_value'])}{unit}"


def _config(ranges: list[list[int]]) -> str:
    return f'`"num_speculative_tokens_per_batch_size": {json.dumps(ranges)}`'


def _single(d: dict[str, Any]) -> str:
    """The one length a deployment runs with: the form a method without a documented per-batch
    config takes (``tuning.per_batch_documented``)."""
    return f'`"num_speculative_tokens": {d["num_speculative_tokens"]}`'


def _per_batch_undocumented(d: dict[str, Any], ranges: list[list[int]], capped: dict[str, Any] | None) -> str:
    """ "Its per-batch lengths …, use an option vLLM 0.32.0 documents as tested with EAGLE, EAGLE-3
    and DFlash only; … uses method ngram.": why a ship line offers the single length instead, with
    the ranges' speedup on the same steps where they turn speculation off somewhere."""
    on_same = (f" ({_ratio(capped['speedup'], capped['interval'])} on the same steps)"
               if capped and capped.get("speedup") is not None else "")
    return (f"Its per-batch lengths (section Speculation length), {_config(ranges)}{on_same}, use an option "
            f"{DYNAMIC_SD_TESTED}; {d['deployment_id']} uses method {d['method']}.")


def _entry(check: dict[str, Any]) -> dict[str, Any]:
    """A check as the verdict's blocking and shared lists carry it."""
    return {"gate": check["gate"], "check": check["name"], "value": check["value"],
            "threshold": check["threshold"], "baseline_value": check.get("baseline_value")}


def _ratio(value: float, interval: list[float] | None) -> str:
    return with_interval(value, *(interval or (None, None)), suffix="×")


MATCHED_ON = {("rounds", True): "at the same batch sizes and contexts", ("rounds", False): "at the same batch sizes",
              ("steps", False): "at the same batch sizes, step by step from iteration lines",
              ("tpot", False): "by request timings at the same concurrency",
              ("logs", False): "from engine logs at the same running requests"}


def gain_text(ev: dict[str, Any], value: float | None = None, interval: list[float] | None = None) -> str:
    """The speedup a verdict rests on, with its interval and what it is matched on (``value``
    and ``interval``: another speedup on the same steps, a capped config's say)."""
    shown = _ratio(ev["speedup"] if value is None else value, ev.get("interval") if value is None else interval)
    base = ev["baseline_id"]
    coverage = f"{ev['coverage']:.0%}" if ev.get("coverage") is not None else "an unknown share"
    requests = f"{ev['num_requests']:,} requests" if ev.get("num_requests") else "its requests"
    matched = MATCHED_ON.get((ev["basis"], bool(ev.get("context_known"))), "at the same loads")
    if ev["basis"] == "tpot":
        return f"{shown} the output-token rate of {base} {matched}, on {coverage} of its output tokens ({requests})"
    if ev["basis"] == "logs":
        return f"{shown} the throughput of {base} {matched}, on {coverage} of its generated tokens"
    if ev["basis"] == "steps":
        steps = f"{ev['decode_steps']:,} decode steps" if ev.get("decode_steps") else "its decode steps"
        # the assumption the number rests on: vLLM prints the scheduled tokens per iteration, not the committed
        assumed = ("; committed tokens per step estimated from the log's acceptance windows"
                   if "window" in (ev.get("counts_from") or []) else "")
        return f"{shown} the throughput of {base} {matched}, on {coverage} of its committed tokens ({steps}{assumed})"
    return f"{shown} the throughput of {base} {matched}, on {coverage} of its tokens ({requests})"


def _undecided(ev: dict[str, Any], config: Config) -> str:
    """Why a known speedup does not decide, in the verdict's words (the gate check's reason
    says the same with the raw numbers)."""
    gate, floor = config.gates.capacity, config.evidence.min_requests
    interval, coverage, n = ev.get("interval"), ev.get("coverage"), ev.get("num_requests")
    if ev.get("not_matched"):
        miss = ev["not_matched"][0]
        return (f"it is not matched on context: median prompts of {miss['prompt_tokens_median']:,.0f} tokens against "
                f"{miss['baseline_prompt_tokens_median']:,.0f} on {ev['baseline_id']}, and no context lengths "
                "to match its steps on")
    if n is not None and n < floor:
        return f"it rests on {n:,} requests ({floor:,} needed)"
    if not interval or None in interval:
        return "there is no interval to tell noise from a gain"
    if interval[0] > gate.min_speedup:
        share = "an unknown share" if coverage is None else f"only {coverage:.0%}"
        return (f"it covers {share} of its tokens ({gate.min_speedup_coverage:.0%} needed): the rest ran where "
                f"{ev['baseline_id']} never did")
    return f"the interval includes {gate.min_speedup:g}, so the data can't tell whether it pays"


def _settle(ev: dict[str, Any], d: dict[str, Any], config: Config, doc: dict[str, Any] | None = None) -> str:
    """What would settle an inconclusive speedup: the data on the short side, a baseline where
    it ran, or context lengths."""
    gate, floor = config.gates.capacity, config.evidence.min_requests
    coverage, interval = ev.get("coverage"), ev.get("interval")
    if ev.get("not_matched"):
        return (f"context_len on the rounds of both {d['deployment_id']} and {ev['baseline_id']} (so each step is "
                f"matched at its context), or a baseline serving the same prompts, would settle it")
    if ev.get("num_requests") is not None and ev["num_requests"] < floor:
        return f"at least {floor:,} of its requests (it has {ev['num_requests']:,}) would settle it"
    if interval and interval[0] > gate.min_speedup and (coverage is None or coverage < gate.min_speedup_coverage):
        missing = [u for u in d.get("uncovered_buckets") or [] if u.get("committed_share")]
        if ev["basis"] == "rounds" and missing:
            where = _where(missing)
            share = sum(u["committed_share"] for u in missing)
            return (f"{ev['baseline_id']} measured at {where} (where {share:.0%} of its tokens ran), with enough "
                    "steps and requests at each load, would settle it")
        return (f"a baseline that ran the loads it ran (at least {gate.min_speedup_coverage:.0%} of its tokens) "
                "would settle it")
    if not interval or None in interval:
        return "more requests, enough to resample, would settle it"
    return _settle_by_side(ev, d, gate.min_speedup, doc)


def _where(uncovered: list[dict[str, Any]]) -> str:
    """ "batch 65-128" or "batch 70 and batch 100-128": where uncovered steps ran."""
    names = []
    for u in uncovered:
        low, high = u.get("min_batch_size"), u.get("max_batch_size")
        name = (f"batch {u['batch_bucket']}" if low is None else
                f"batch {low}" if low == high else f"batch {low}-{high}")
        if name not in names:
            names.append(name)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _settle_by_side(ev: dict[str, Any], d: dict[str, Any], minimum: float, doc: dict[str, Any] | None) -> str:
    """Which side's data would settle an interval that includes ``minimum``, and how much.

    The interval is the speedup ×/÷ exp(t·√(V_D + V_B)) (analysis.uncertainty): each side's
    variance falls as 1/n in its data, so f times one side's requests gives V_side / f. The
    interval excludes ``minimum`` once t·√V' < |ln(speedup / minimum)|; the cheaper side
    that gets there alone is named, or both when neither can."""
    interval, value = ev["interval"], ev["speedup"]
    variance = ev.get("variance") or {}
    vd, vb = variance.get("deployment"), variance.get("baseline")
    distance = abs(math.log(value / minimum))
    half = (math.log(interval[1]) - math.log(interval[0])) / 2
    if half <= 0 or distance <= 0:
        return f"more data would settle it only if the speedup moved: it sits at {minimum:g}"
    n = ev.get("num_requests")
    base_n = ev.get("baseline_num_requests")
    base = ev["baseline_id"]
    if vd is None or vb is None or vd + vb <= 0:
        factor = (half / distance) ** 2
        if not n or factor > MAX_SETTLE_FACTOR:
            return (f"more requests would settle it only if the speedup moved: it sits within "
                    f"{abs(value - minimum):.3g} of {minimum:g}")
        return f"about {factor:.1f}× its requests (≈ {math.ceil(n * factor):,}) would settle it, if the speedup stays"
    # the variance that would just exclude the minimum, at the same t
    needed = (vd + vb) * (distance / half) ** 2
    options = []
    if needed > vb and vd > 0:
        options.append(("deployment", vd / (needed - vb)))
    if needed > vd and vb > 0:
        options.append(("baseline", vb / (needed - vd)))
    if not options:
        factor = (vd + vb) / needed
        if factor > MAX_SETTLE_FACTOR:
            return (f"more data would settle it only if the speedup moved: it sits within "
                    f"{abs(value - minimum):.3g} of {minimum:g}")
        return (f"about {factor:.1f}× the requests of both {d['deployment_id']} and {base} would settle it, if "
                "the speedup stays (neither side alone can)")
    side, factor = min(options, key=lambda o: o[1])
    who, count = (d["deployment_id"], n) if side == "deployment" else (base, base_n)
    short = "the deployment" if side == "deployment" else "its baseline"
    share = (vd if side == "deployment" else vb) / (vd + vb)
    if factor > MAX_SETTLE_FACTOR:
        return (f"more data would settle it only if the speedup moved: it sits within "
                f"{abs(value - minimum):.3g} of {minimum:g}")
    amount = f" (≈ {math.ceil(count * factor):,} requests)" if count else ""
    return (f"{short} is the short side ({share:.0%} of the interval's variance): about {factor:.1f}× "
            f"{who}'s requests{amount} would settle it, if the speedup stays")


def _short_of_requests(d: dict[str, Any], config: Config) -> tuple[int, int] | None:
    """(requests, floor) when the deployment's rounds come from fewer requests than
    ``[evidence] min_requests``, or from a single one, which is below every floor (no interval
    resamples one request) even where min_requests is set to 1; else None."""
    n, floor = d.get("num_requests"), config.evidence.min_requests
    if not n or (n >= floor and n > 1):
        return None
    return n, max(floor, 2)


def _short_text(n: int, floor: int, config: Config) -> str:
    """ "1 request, floor 10 ([evidence] min_requests)" """
    named = " ([evidence] min_requests)" if floor == config.evidence.min_requests else ""
    return f"{n:,} request{'' if n == 1 else 's'}, floor {floor:,}{named}"


def _undecided_settle(ev: dict[str, Any], d: dict[str, Any], doc: dict[str, Any]) -> str:
    """Which data would decide a deployment that has no speedup at all."""
    dep, base = d["deployment_id"], d.get("baseline_id")
    if base is None:
        return (f"a plain-decoding deployment (method none) of model {d.get('model')} with target_quant "
                f"{d.get('target_quant')}, or its baseline_id set, would decide it")
    logged = {r["deployment_id"] for r in doc.get("intervals") or []}
    if dep in logged and base not in logged:
        return (f"the log of {base} would decide it: `specan import vllm-log BASELINE.log --deployment {base} "
                "--out TRACES` (or sglang-log), then the report again")
    if ev["basis"] == "logs":
        floor = (d.get("log_speedup_evidence") or {}).get("min_intervals")
        return (f"longer logs of both {dep} and {base}, with the same running-request counts"
                + (f" ({floor} usable lines each per bucket, [evidence] min_log_intervals)" if floor else "")
                + ", would decide it")
    if ev.get("never_met"):
        return (f"{base} measured at {load_range(ev['loads'], ev['basis'])}, where {dep} ran, would settle it")
    if ev["basis"] == "rounds":
        return (f"steps of {base} at the batch sizes {dep} ran (enough steps and requests at each load) "
                "would decide it")
    return f"request timings (first_token_time, finish_time) of both {dep} and {base} would decide it"


def verdicts(doc: dict[str, Any], evidence: dict[str, dict], config: Config | None = None) -> list[dict[str, Any]]:
    """One verdict per deployment (see the module docstring)."""
    config = config or Config()
    gates = doc.get("gates") or []
    recommendations = {r["deployment_id"]: r for r in (doc.get("tuning") or {}).get("recommendations") or []}
    served = {}
    for d in doc["deployments"]:
        if d.get("baseline_id"):
            served.setdefault(d["baseline_id"], []).append(d["deployment_id"])
    out = []
    for d in doc["deployments"]:
        dep = d["deployment_id"]
        mine = [{"gate": g["gate"], **c} for g in gates if g["deployment_id"] == dep for c in g["checks"]]
        if d["method"] == "none":
            failing = [c for c in mine if c["status"] == FAIL]
            text = f"{dep} is plain decoding, the baseline of " + (
                ", ".join(served[dep]) if dep in served else "no deployment here") + "."
            if failing:
                text += (" It misses " + ", ".join(failed_check_text(c) for c in failing)
                         + ": a service level that holds with or without speculation.")
            out.append({"deployment_id": dep, "action": "baseline", "basis": None, "config": None, "text": text,
                        "blocking": [], "shared": [_entry(c) for c in failing], "not_checked": []})
            continue
        out.append(_speculative(d, mine, evidence[dep], recommendations.get(dep) or {}, gates, doc, config))
    return _ambiguous_configurations(out, doc)


def _ambiguous_configurations(out: list[dict[str, Any]], doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A deployment whose ``deployments`` rows differ within one partition (duplicate_key):
    which configuration its rounds ran is unknown, so its verdict is ``unknown``; one that
    has no other partition's row is not in ``doc["deployments"]`` and gets its entry here."""
    conflicts: dict[str, list[dict]] = {}
    for c in (doc.get("input") or {}).get("deployment_conflicts") or []:
        conflicts.setdefault(c["deployment_id"], []).append(c)
    if not conflicts:
        return out
    by_id = {v["deployment_id"]: i for i, v in enumerate(out)}
    for dep, found in conflicts.items():
        where = ", ".join(c["partition"] for c in found if c["partition"]) or "the trace"
        rounds = sum(c["rows"].get("rounds", 0) for c in found)
        settle = f"one deployments row per deployment_id on {where} would decide it"
        text = (f"No verdict for {dep}: its deployments rows differ on {where} (duplicate_key), so which "
                f"configuration its {rounds:,} rounds there ran is unknown; {settle}.")
        entry = {"deployment_id": dep, "action": "unknown", "basis": None, "config": None, "text": text,
                 "speedup": None, "speedup_interval": None, "coverage": None, "num_requests": None,
                 "baseline_id": None, "baseline_num_requests": None, "blocking": [], "shared": [],
                 "not_checked": [], "settle": settle}
        if dep in by_id:
            kept = out[by_id[dep]]
            entry.update({k: kept.get(k) for k in ("baseline_id", "baseline_num_requests", "num_requests")})
            out[by_id[dep]] = entry
        else:
            out.append(entry)
    return out


def _speculative(d: dict, mine: list[dict], ev: dict, rec: dict, gates: list[dict], doc: dict,
                 config: Config) -> dict[str, Any]:
    dep, base = d["deployment_id"], d.get("baseline_id")
    ranges = rec.get("num_speculative_tokens_per_batch_size") or None
    blocking = sorted(blocking_checks(gates, dep), key=lambda c: REASON_ORDER.index(c["name"])
                      if c["name"] in REASON_ORDER else len(REASON_ORDER))
    shared = [c for c in mine if c["status"] == SHARED]
    speed = next((c for c in mine if c["name"] == "speedup"), None)
    # checks left unknown (the speedup's own unknown is the verdict's subject)
    not_checked = [c for c in mine if c["status"] == UNKNOWN and c["name"] != "speedup"]
    settle = None
    pays = ranges and any(k > 0 for _, _, k in ranges)
    capped = rec.get("config_speedup")
    unmeasured = no_baseline_buckets(rec)
    # a method vLLM documents no per-batch config for is offered its one length (as configured)
    single = not per_batch_documented(d["method"])
    if blocking:
        action = "dont_ship"
        reasons = []
        for c in blocking:
            if c["name"] == "speedup":
                reasons.append(f"{gain_text(ev)}: slower than plain decoding")
            else:
                reasons.append(blocking_text(c, base))
        text = f"Don't ship {dep}: " + "; ".join(reasons) + "."
        if speed is not None and speed["status"] == "pass" and pays:
            text += (f" Otherwise it pays, {gain_text(ev)}, as configured ({_single(d)})." if single else
                     f" Otherwise it pays, {gain_text(ev)}, with {_config(ranges)}.")
        elif speed is not None and speed["status"] == FAIL and pays and ev["basis"] == "rounds":
            cap = max(end for _, end, k in ranges if k > 0)
            on_same = (f" ({_ratio(capped['speedup'], capped['interval'])} on the same steps)"
                       if capped and capped.get("speedup") is not None else "")
            if single:
                text += (f" It pays at batch sizes up to {cap}, but turning speculation off where it does not "
                         f"takes {_config(ranges)}{on_same}, an option {DYNAMIC_SD_TESTED}; {dep} uses method "
                         f"{d['method']}.")
            else:
                text += (f" It pays at batch sizes up to {cap}: {_config(ranges)} turns speculation off where it "
                         f"does not{on_same}; measure that config before deciding again.")
    elif ev["speedup"] is None and ev.get("never_met"):
        action = "inconclusive"
        settle = _undecided_settle(ev, d, doc)
        # the ranges may meet and still no unit match: between loads too far apart, or beyond a cell's own
        # loads at the ends; then the line says how many units fell where, not that the two never met
        met = "" if not ranges_meet(ev["loads"], ev["baseline_loads"]) else (
            ", which meet, but " + unmatched_text(ev.get("unmatched") or {}, ev["basis"], base))
        text = (f"Not enough data to decide {dep}: not matched on load, it ran at "
                f"{load_range(ev['loads'], ev['basis'])} and {base} at {load_range(ev['baseline_loads'], ev['basis'])}"
                f"{met}; {settle}.")
    elif ev["speedup"] is None:
        action = "unknown"
        settle = _undecided_settle(ev, d, doc)
        short = _short_of_requests(d, config)
        if short:
            # the missing speedup is not all: its requests are too few for any check to decide on
            settle = f"at least {short[1]:,} of its requests and {settle}"
            text = (f"No verdict for {dep}: its speedup is unknown ({ev['reason']}), and not enough data: "
                    f"{_short_text(*short, config)}; {settle}.")
        else:
            text = f"No verdict for {dep}: its speedup is unknown ({ev['reason']}); {settle}."
    elif speed is not None and speed["status"] == UNKNOWN:
        action = "inconclusive"
        settle = _settle(ev, d, config, doc)
        text = (f"Not enough data to decide {dep}: {gain_text(ev)}; {_undecided(ev, config)}. "
                f"{settle[0].upper()}{settle[1:]}.")
    elif ranges and all(k == 0 for _, _, k in ranges):
        if any(b.get("evidence") == "loses" for b in rec.get("buckets") or []):
            action = "dont_ship"
            text = (f"Don't ship {dep}: no batch range pays by its own evidence, though over all of its tokens it "
                    f"measured {gain_text(ev)}; see section Speculation length.")
        else:
            action = "inconclusive"
            settle = "a baseline at the loads it ran, and more requests at each, would settle it"
            text = (f"Not enough data to decide {dep}: {gain_text(ev)}, but no batch range's own speedup decides "
                    f"its length ({_unmeasured_text(unmeasured, base) or 'none is above 1 by its interval'}). "
                    f"{settle[0].upper()}{settle[1:]}.")
    elif ranges and single:
        # the speedup as it ran is the configured length's: the per-batch ranges are said, not offered
        action = "ship"
        text = f"Ship {dep} as configured, {_single(d)}: {gain_text(ev)}."
        if any(k != d["num_speculative_tokens"] for _, _, k in ranges):
            text += " " + _per_batch_undocumented(d, ranges, capped)
    elif ranges and any(k == 0 for _, _, k in ranges):
        action = "cap"
        off = [f"{start}-{end}" if start != end else f"{start}" for start, end, k in ranges if k == 0]
        where = ("capped at batch " + str(max(end for _, end, k in ranges if k > 0))
                 if ranges[-1][2] == 0 and len(off) == 1 else "off at batch " + ", ".join(off))
        quoted = (gain_text(ev, capped["speedup"], capped["interval"]) + " with that config, on the same steps"
                  if capped and capped.get("speedup") is not None else gain_text(ev))
        text = f"Ship {dep} with speculation {where}, {_config(ranges)}: {quoted}"
        if capped and capped.get("speedup") is not None:
            text += f" (as it ran: {_ratio(ev['speedup'], ev.get('interval'))})"
        missing = _unmeasured_text(unmeasured, base)
        text += (f"; {missing}." if missing else ".")
    elif ranges:
        action = "ship"
        text = f"Ship {dep} with {_config(ranges)}: {gain_text(ev)}."
    else:
        action = "ship"
        text = (f"Ship {dep} as configured (num_speculative_tokens {d['num_speculative_tokens']}): "
                f"{gain_text(ev)}; no per-batch recommendation"
                + (" (it needs rounds)." if ev["basis"] == "steps" else
                   " (it needs steps)." if ev["basis"] != "rounds" else " (no batch range decides on its own; see "
                   "section Speculation length)."))
    if ev.get("basis") == "rounds" and not ev.get("context_known") and action in ("ship", "cap"):
        text += " Not matched on context: the rounds have no context_len."
    if action in ("ship", "cap") and not_checked:
        text += " Undecided: " + "; ".join(_undecided_check(c, base) for c in not_checked) + "."
    return {"deployment_id": dep, "action": action, "basis": ev["basis"], "config": None if single else ranges,
            "text": text,
            "speedup": ev["speedup"], "speedup_interval": ev.get("interval"), "coverage": ev.get("coverage"),
            "config_speedup": capped.get("speedup") if capped else None,
            "config_speedup_interval": capped.get("interval") if capped else None,
            "matched_on": ev.get("matched_on"), "not_matched": ev.get("not_matched"),
            "num_requests": ev.get("num_requests"), "baseline_id": base,
            "baseline_num_requests": ev.get("baseline_num_requests"),
            "blocking": [_entry(c) for c in blocking], "shared": [_entry(c) for c in shared],
            "not_checked": [c["name"] for c in not_checked], "settle": settle}


def _undecided_check(check: dict[str, Any], baseline_id: str | None) -> str:
    """A check left unknown, in the words of a verdict line: for a latency percentile past
    its target, what the baseline gives at the same load and why that does not decide."""
    label, kind = _label(check["name"])
    interval, value = check.get("interval"), check.get("value")
    if check["name"] in LATENCY_CHECKS and interval and value is not None:
        shown = f"{label} {_number(kind, value, unit=True)}"
        target = _number(kind, check["threshold"], unit=True)
        if interval[0] <= check["threshold"]:
            return f"{shown} [{interval[0]:,.0f}, {interval[1]:,.0f}] straddles its target {target}"
        if "not matched on load" in (check.get("reason") or ""):
            return f"{shown} misses {target}, but {baseline_id} never ran at its load"
        ratio, r_int = check.get("ratio"), check.get("ratio_interval")
        if check.get("baseline_value") is not None and ratio is not None and r_int:
            return (f"{shown} misses {target}, as {baseline_id} does at the same load "
                    f"({_number(kind, check['baseline_value'], unit=True)}); speculation's share can't be told "
                    f"({ratio:.2f}× it, [{r_int[0]:.2f}, {r_int[1]:.2f}])")
    return f"{label} ({_short(check.get('reason'))})"


def _short(reason: str | None) -> str:
    """A check's reason up to its first clause: what an "Undecided" list says of it."""
    if not reason:
        return "unknown"
    cut = min((i for i in (reason.find(": "), reason.find("; ")) if i > 0), default=len(reason))
    return reason[:cut]


def _unmeasured_text(buckets_: list[dict[str, Any]], baseline_id: str | None) -> str | None:
    """ "no baseline at batch 65-128: speculation off there until measured"."""
    if not buckets_:
        return None
    names = [b["batch_bucket"] for b in buckets_]
    where = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"no baseline at batch {where}: speculation off there until {baseline_id or 'a baseline'} is measured there"


PASSING = ("ship", "cap")


def check_failures(verdicts_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``report --check`` and ``nightly``: the speculative deployments that do not pass, one
    rule, the report's own: a speculative deployment passes only with ship or cap. Each
    entry: deployment_id, action, and the reason in one line (the verdict's text after its
    first colon, or its blocking checks)."""
    out = []
    for v in verdicts_:
        if v["action"] in PASSING or v["action"] == "baseline":
            continue
        reason = v["text"].split(": ", 1)[1] if ": " in v["text"] else v["text"]
        out.append({"deployment_id": v["deployment_id"], "action": v["action"], "reason": reason})
    return out


def any_blocked(verdicts_: list[dict[str, Any]]) -> bool:
    """True when some speculative deployment does not pass (``check_failures``)."""
    return bool(check_failures(verdicts_))


def shared_findings(doc: dict[str, Any]) -> list[str]:
    """The service-level findings, once each: per baseline and check, the deployments that miss
    the check's threshold alike with it (their shared checks); then each check a baseline misses
    that none of its deployments shares (every one was blocked on it, say)."""
    gates = doc.get("gates") or []
    checks = {(g["deployment_id"], c["name"]): c for g in gates for c in g["checks"]}
    verdict = doc.get("verdict") or []
    grouped: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for v in verdict:
        if v["action"] != "baseline":
            for s in v["shared"]:
                grouped.setdefault((v["baseline_id"], s["check"]), []).append((v["deployment_id"], s["value"]))
    out = [shared_text(checks[(deps[0][0], name)], deps, baseline) for (baseline, name), deps in grouped.items()]
    for v in verdict:
        if v["action"] == "baseline":
            out += [f"{v['deployment_id']} (plain decoding) misses "
                    f"{failed_check_text(checks[(v['deployment_id'], s['check'])])}"
                    for s in v["shared"] if (v["deployment_id"], s["check"]) not in grouped]
    return out
