"""Render the report document as Markdown, in the order of the seed's ledger.

Numbers are rounded here, for display only; the JSON keeps full precision.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ..decide import regression
from ..analysis.buckets import labels
from ..analysis.precision import with_interval
from ..analysis.tuning import DYNAMIC_SD_TESTED, per_batch_documented
from .cells import DASH, cell, gamma_text, is_missing, num, pct, shown_ratio, table, times
from .gates import render_gates_markdown
from .quant import render_quant_markdown
from .recommend import by_context_markdown, measured_with_interval, speedup_at_k
from .regressions import flag_line, status_lines

BATCH_BUCKETS = labels("batch")


def _by_deployment(items: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for item in items:
        grouped[item["deployment_id"]].append(item)
    return grouped


# The sections that need step times (round time, t0): without steps they are left out,
# and the summary says so once, instead of tables of dashes.
STEP_SECTIONS = ("the round ledger", "the load curve", "context length", "speculation length")


def render(doc: dict[str, Any]) -> str:
    sections: list[Callable[[dict], str]] = [
        _header, _what_to_do, _regressions, _findings, _summary, _ledger, _positions, _truncation, _structured, _load_curve,
        _latency, _categories, _slices, _context, _trees, _capacity, _temperature, _tuning, _quantization, _intervals,
        _reconciliation, _anomalies, _gates, _notes,
    ]
    if doc["input"]["rounds"] == 0 and doc.get("intervals") and has_step_counts(doc):
        # Steps with their own token counts and no rounds (the vLLM recorder, iteration lines):
        # the steps-basis speedup, its load curve, latency and capacity; what is missing is named.
        sections = [_header, _what_to_do, _regressions, _findings, _summary, _counters_only, _steps_load_curve,
                    _latency, _capacity, _intervals, _reconciliation, _anomalies, _gates, _notes]
    elif doc["input"]["rounds"] == 0 and doc.get("intervals"):
        # Aggregate counters only (vllm-log or prometheus imports): the decision, what is missing, what is there.
        sections = [_header, _what_to_do, _findings, _counters_only, _intervals, _reconciliation, _gates, _notes]
    elif not has_steps(doc):
        sections = [s for s in sections if s not in (_ledger, _load_curve, _context, _tuning)]
    return _numbered("\n".join(part for part in (s(doc) for s in sections) if part))


def has_steps(doc: dict) -> bool:
    """The traces have clean steps: round times, t0 and everything built on them exist."""
    return bool((doc["input"].get("clean_rows") or {}).get("steps", doc["input"].get("steps")))


_NUMBERED_HEADING = re.compile(r"^## \d+\. ", re.M)


def _numbered(text: str) -> str:
    """Number the numbered sections in the order they appear, so a section left out
    leaves no gap in the numbers."""
    counter = iter(range(1, 1000))
    return _NUMBERED_HEADING.sub(lambda _m: f"## {next(counter)}. ", text)


def has_step_counts(doc: dict) -> bool:
    """Some deployment's decode steps carry their own token counts (no rounds): the steps basis."""
    return any((d.get("iteration_steps") or {}).get("decode_steps") for d in doc["deployments"])


def _counted_per_interval(doc: dict, d: dict) -> str:
    """Where the rounds give no accept length but the interval counters of the deployment
    do (the vLLM recorder, iteration lines beside logs), say where it is."""
    if not is_missing(d.get("mean_accept_length")):
        return ""
    counted = any(r["deployment_id"] == d["deployment_id"] and not r.get("benchmark")
                  and not is_missing(r.get("mean_accept_length")) for r in doc.get("intervals") or [])
    return " (no rounds; per hour from the engine's counters: Aggregate counters)" if counted else ""


def _counters_only(doc: dict) -> str:
    if has_step_counts(doc):
        return ("These traces have steps with their own token counts and no rounds (the vLLM recorder or "
                "engine iteration lines: docs/recorder.md, \"What this source lacks\"). Per-request acceptance "
                "and accept length, per-position survival by request, stop truncation, drafts invalidated by "
                "structured output, the round ledger (draft and verify times), categories and repetition, "
                "streaming gaps (ITL, max stall) and a speculation length per batch size need rounds and are "
                "left out. The speedup is matched step by step at each batch size from the steps' own token "
                "counts (the load curve below); acceptance comes from the interval counters.\n")
    return ("These traces hold aggregate counters only (the intervals table), no rounds: per-round "
            "acceptance, positions, stop truncation, structured output, round times and the load curve by "
            "batch size are unavailable. The speedup comes from the logs of a deployment and of its baseline "
            "at the same running-request counts (below). Import per-request responses (`specan import "
            "vllm-responses`) for the rest.\n")


def _steps_load_curve(doc: dict) -> str:
    curve = _iteration_curve(doc)
    if not curve:
        return ""
    return ("## 6. Load curve by batch bucket\n\n"
            "As batches grow, plain decoding uses the idle compute that speculation relied on. Each decode "
            "step is matched with the baseline's steps at its own batch size; the speedup carries its 95% "
            "interval.\n" + curve)


def _header(doc: dict) -> str:
    inp = doc["input"]
    reasons = ", ".join(f"{k} {v}" for k, v in inp["rejected_by_reason"].items())
    rejected = f"{inp['rejected_rows']:,} rejected ({reasons})" if inp["rejected_rows"] else "0 rejected"
    return ("# specan report\n\n"
            f"Input rows: {deployment_rows(inp)}, {inp['requests']:,} requests, "
            f"{inp['steps']:,} steps, {inp['rounds']:,} rounds; {rejected}.\n")


def deployment_rows(inp: dict) -> str:
    """"18 deployment rows (6 deployments; 12 identical copies merged)" when copies were merged."""
    read = inp["deployments"]
    clean = (inp.get("clean_rows") or {}).get("deployments", read)
    rejected = sum((inp.get("rejected_by_table") or {}).get("deployments", {}).values())
    merged = read - clean - rejected
    if merged <= 0:
        return f"{read:,} deployments"
    return f"{read:,} deployment rows ({clean:,} deployments; {merged:,} identical copies merged)"


def with_interval_of(d: dict, metric: str, suffix: str = "") -> str:
    """A deployment's headline metric to the decimals its 95% interval supports, with the interval.
    The accept length's interval resamples requests: on a single request every resample is that
    request, so its [x, x] is no interval, and the value is shown with "(1 request)" instead."""
    if is_missing(d.get(metric)):
        return DASH
    if metric == "mean_accept_length" and single_request(d):
        return f"{num(d[metric])} (1 request)"
    interval = d.get(f"{metric}_interval")
    if interval is None and suffix == "×":
        return shown_ratio(d[metric])[0] + suffix      # no interval: never "1.00" for a ratio below 1
    return with_interval(d[metric], *(interval or (None, None)), suffix=suffix)


def _gamma_remark(doc: dict) -> str:
    """Say why γ is the dash, with the longest draft the rounds show."""
    unknown = []
    for d in doc["deployments"]:
        if gamma_text(d) != DASH:
            continue
        longest = max((p["position"] for p in d.get("positions") or [] if p.get("drafted")), default=None)
        unknown.append(d["deployment_id"] + (f" (its rounds drafted up to {longest:,} tokens)" if longest else ""))
    if not unknown:
        return ""
    return (f"\nγ is – for {_joined(unknown)}: {'its deployments row gives' if len(unknown) == 1 else 'their rows give'} "
            "num_speculative_tokens 0, which a speculative method cannot run with, so the configured length is "
            "unknown (`specan import … --num-speculative-tokens N` sets it).\n")


def single_request(d: dict) -> bool:
    """The deployment's rounds come from one request: below every floor, and no interval."""
    return d.get("num_requests") == 1


def what_to_do_lines(doc: dict) -> list[dict]:
    """The verdicts "What to do" shows: one per speculative deployment (ship with this
    config, cap speculation, don't ship and why, or not enough data and what would settle
    it). A baseline's line only when nothing speculates: what it misses with or without
    speculation is a finding about each deployment pair instead."""
    verdict = doc.get("verdict") or []
    spec = [v for v in verdict if v["action"] != "baseline"]
    return spec or verdict


def _what_to_do(doc: dict) -> str:
    lines = [v["text"] for v in what_to_do_lines(doc)]
    if not lines:
        return ""
    return "## What to do\n\n" + "\n".join(f"- {line}" for line in lines) + "\n"


def _regressions(doc: dict) -> str:
    if "regressions" not in doc:
        return ""
    # Under the heading, the CLI's "Regressions: " prefix would only repeat it.
    lines = [line.removeprefix("Regressions: ") for line in status_lines(doc["regression_check"], doc["regressions"])]
    head = "## Regressions\n\n" + "".join(f"{line[0].upper()}{line[1:]}.\n\n" for line in lines)
    if not doc["regressions"]:
        return head.rstrip("\n") + "\n"
    flags = "".join(f"- {flag_line(r, doc['date'])}\n" for r in doc["regressions"])
    # a flag from before the reference rule has no "rule": it is the window's
    by_window = [r for r in doc["regressions"] if r.get("rule", "window") == "window"]
    by_reference = [r for r in doc["regressions"] if r.get("rule") == "reference"]
    parts = [head + flags]
    if by_window:
        body = [(r["deployment_id"], r["metric"], num(r["baseline"]), pct(r["spread"]), pct(r["limit"]),
                 _window(r["window_dates"]), str(len(r["excluded_flagged_dates"]))) for r in by_window]
        # with reference flags below, "each change" alone would claim theirs too
        each = "Against the window, each change" if by_reference else "Each change"
        parts.append(f"\n{each} is against the median of its window, the latest earlier dates not "
                     "flagged themselves, and past its limit: the larger of its threshold and the window's spread, "
                     f"{regression.SPREAD_SDS:g} × 1.4826 × MAD / median.\n\n"
                     + table(["deployment", "metric", "median before", "spread", "limit", "window",
                              "flagged dates left out"], body))
    if by_reference:
        body = [(r["deployment_id"], r["metric"], num(r["baseline"]), pct(r["spread"]), pct(r["limit"]),
                 _window(r["reference_dates"])) for r in by_reference]
        parts.append("\nAgainst the reference, each change is against the median of the deployment's first "
                     "window_days dates (from accept_since, where that is in effect) and past its limit: the larger "
                     f"of its threshold and the reference's spread, {regression.SPREAD_SDS:g} × 1.4826 × MAD of "
                     "its day-to-day differences / √2 / median.\n\n"
                     + table(["deployment", "metric", "reference median", "spread", "limit", "reference"], body))
    return "".join(parts)


def _window(dates: list[str]) -> str:
    return f"{dates[0]} – {dates[-1]} ({len(dates)})"


def _spec(doc: dict) -> list[dict]:
    return [d for d in doc["deployments"] if d["method"] != "none"]


def _spec_rows(doc: dict, items: list[dict]) -> list[dict]:
    """The rows of speculative deployments: a baseline drafts nothing, so acceptance tables leave it out."""
    spec = {d["deployment_id"] for d in _spec(doc)}
    return [item for item in items if item["deployment_id"] in spec]


def _findings(doc: dict) -> str:
    """One plain sentence per speculative deployment: does it pay, and up to what load."""
    curve = _by_deployment(doc["load_curve"])
    baselines = {d["deployment_id"]: d for d in doc["deployments"]}
    lines = []
    for d in _spec(doc):
        dep = d["deployment_id"]
        if is_missing(d["speedup"]):
            if d.get("tpot_speedup") is not None:
                # response-only imports: no steps, so no round-matched speedup, but request timings give one
                word = shown_ratio(d["tpot_speedup"])[1]
                lines.append(f"- **{dep}** ({d['method']}): speedup per round unknown (no steps); by request "
                             f"timings it is {with_interval_of(d, 'tpot_speedup', '×')} ({word}) per output token "
                             "than its baseline at the same concurrency (tpot_speedup), over "
                             f"{pct(d.get('tpot_speedup_coverage'))} of its output tokens.")
            elif d.get("log_speedup") is not None:
                word = shown_ratio(d["log_speedup"])[1]
                lines.append(f"- **{dep}** ({d['method']}): by engine logs it is {with_interval_of(d, 'log_speedup', '×')} "
                             f"the throughput of {d['baseline_id']} ({word}) at the same running requests, over "
                             f"{pct(d.get('log_speedup_coverage'))} of its generated tokens (log_speedup).")
            else:
                lines.append(f"- **{dep}** ({d['method']}): speedup unknown, see the notes.")
            continue
        _, verdict = shown_ratio(d["speedup"])
        matched = "batch sizes and contexts" if (d.get("matched") or {}).get("rounds", {}).get("context_known") \
            else "batch sizes"
        text = (f"- **{dep}** ({d['method']}, γ={gamma_text(d)}): {with_interval_of(d, 'speedup', '×')} "
                f"the throughput of {d['baseline_id']} at the same {matched} ({verdict}), over "
                f"{pct(d['speedup_coverage'])} of its tokens; mean accept length "
                f"{with_interval_of(d, 'mean_accept_length')}{_counted_per_interval(doc, d)}.")
        text += _by_interval(curve.get(dep, []))
        text += _latency_finding(d, baselines.get(d["baseline_id"]))
        lines.append(text)
    lines += _quant_findings(doc)
    lines += _service_level_findings(doc)
    lines += _reconciliation_findings(doc)
    if not lines:
        return ""
    return "## Findings\n\n" + "\n".join(lines) + "\n"


def _by_interval(curve: list[dict]) -> str:
    """Where the speedup pays by its 95 % interval, where it loses, and where the data can't tell."""
    known = [b for b in curve if b.get("speedup_interval")]
    pays = [b["batch_bucket"] for b in known if b["speedup_interval"][0] > 1]
    loses = [b["batch_bucket"] for b in known if b["speedup_interval"][1] < 1]
    open_ = [b["batch_bucket"] for b in known if b["speedup_interval"][0] <= 1 <= b["speedup_interval"][1]]
    if not known:
        return ""
    if pays and not loses and not open_:
        return " It pays at every observed batch size (by the 95% interval of each)."
    if loses and not pays and not open_:
        return " It loses at every observed batch size (by the 95% interval of each)."
    parts = []
    if pays:
        parts.append(f"pays at batch {', '.join(pays)}")
    if loses:
        parts.append(f"loses at {', '.join(loses)}")
    if open_:
        parts.append(f"can't tell at {', '.join(open_)}")
    return " By the 95% interval of each batch bucket it " + "; ".join(parts) + "."


def _reconciliation_findings(doc: dict) -> list[str]:
    by_dep: dict[str, list[str]] = {}
    for r in doc.get("reconciliation") or []:
        if r["disagrees"]:
            by_dep.setdefault(r["deployment_id"], []).append(r["channel"])
    return [f"- **{dep}**: its channels disagree: {', '.join(channels)} against "
            f"{next(r['reference_channel'] for r in doc['reconciliation'] if r['deployment_id'] == dep)} "
            "by more than 1 % (Channels agree?); numbers read from one channel may be off."
            for dep, channels in by_dep.items()]


def _service_level_findings(doc: dict) -> list[str]:
    """Each latency target a deployment and its baseline miss alike, stated once per pair: a
    service-level problem that speculation does not cause, so it blocks nothing."""
    from ..decide.verdict import shared_findings

    return [f"- {sentence[0].upper()}{sentence[1:]}. A service-level problem that speculation does not cause: "
            "it blocks nothing (Deployment gates)." for sentence in shared_findings(doc)]


def _quant_findings(doc: dict) -> list[str]:
    """The combined quantization result: a quantized speculative deployment against the model's
    reference. Each part is named with what it is measured against, the same reference (the
    matrix's throughput ratios), so that "quantization alone 1.39×" cannot be read as the
    combined deployment against its quantized baseline, which its own finding gives."""
    lines = []
    for entry in (doc.get("quantization") or {}).get("models") or []:
        reference = (entry.get("reference") or {}).get("deployment_id")
        for c in entry.get("comparisons") or []:
            if c.get("combined_ratio") is None or reference is None:
                continue
            shown, word = shown_ratio(c["combined_ratio"])
            parts = [f"quantization alone ({c['quant_only_id']} against {reference}) is "
                     f"{shown_ratio(c['quant_only_ratio'])[0]}×" if c.get("quant_only_ratio") is not None else None,
                     f"speculation alone ({c['spec_only_id']} against {reference}) is "
                     f"{shown_ratio(c['spec_only_ratio'])[0]}×" if c.get("spec_only_ratio") is not None else None]
            alone = "; ".join(p for p in parts if p)
            lines.append(f"- **{c['deployment_id']}** is {shown}× {reference} ({word}), quantization and speculation "
                         f"combined" + (f"; {alone}" if alone else "") + " (Quantization matrix).")
    return lines


def _latency_finding(d: dict, baseline: dict | None) -> str:
    """Name the streaming metrics that got much worse than the baseline's: TPOT can improve
    while users see longer pauses."""
    if baseline is None:
        return ""
    worse = []
    for metric in ("tpot", "itl", "max_stall"):
        mine = d["latency_ms"].get(metric, {}).get("p99")
        theirs = baseline["latency_ms"].get(metric, {}).get("p99")
        if mine is not None and theirs and mine > 1.25 * theirs:
            worse.append(f"{metric} p99 {mine:,.0f} ms vs {theirs:,.0f} ms")
    return f" Streaming is burstier than the baseline: {'; '.join(worse)}." if worse else ""


def _summary(doc: dict) -> str:
    body = [
        (d["deployment_id"], d["method"], gamma_text(d), d["baseline_id"] or DASH,
         with_interval_of(d, "mean_accept_length"), num(d["mean_accept_length_per_request"]),
         pct(d["acceptance_rate"]), num(d["tokens_per_round"]), with_interval_of(d, "speedup", "×"),
         pct(d["speedup_coverage"]), with_interval_of(d, "tpot_speedup", "×"), failed_text(d))
        for d in doc["deployments"]
    ]
    return ("## 1. Summary\n\n"
            "Mean accept length is 1 + C/R (vLLM's definition); per request is the mean over requests. "
            "Tokens per round counts plain rounds and stop truncation: the real progress per step. "
            "Speedup is throughput-weighted against the matched baseline, each decode step at its own batch size "
            "(and context, where both sides' rounds have context_len), between the loads the baseline measured. "
            "Speedups carry a 95% interval (a block jackknife over time, both sides), accept length one (a "
            "bootstrap over requests), each with the decimals it supports; "
            "coverage is the share of the deployment's committed tokens it covers (decode-only steps at loads "
            "and contexts the baseline ran; the quantization matrix's coverage counts decode-only tokens only). "
            "Baselines (plain decoding) appear where they carry numbers (here, the ledger, load, latency and "
            "capacity); the acceptance tables leave them out.\n\n"
            + table(["deployment", "method", "γ", "baseline", "accept length", "per request", "acceptance",
                     "tokens/round", "speedup", "coverage", "TPOT speedup", "failed requests"], body)
            + "\nTPOT speedup compares time per output token from request timings alone, each request at its "
              "concurrency from the timings; it is what remains when a trace has no steps. Failed requests ended in error or "
              "abort (of all requests; the correctness gate compares the share with the baseline's).\n"
            + _gamma_remark(doc)
            + _single_request_remark(doc)
            + ("" if has_steps(doc) else
               f"\nThese traces have no steps (per-step times; a response-only import has none), so "
               f"{', '.join(STEP_SECTIONS[:-1])} and {STEP_SECTIONS[-1]} are left out: they need round times."
               + _stepless_basis(doc) + "\n"))


# What a verdict without steps rests on, as the summary names it.
STEPLESS_BASES = {"tpot": "the TPOT speedup", "logs": "the speedup from engine logs"}


def _stepless_basis(doc: dict) -> str:
    """ " The verdict rests on the TPOT speedup.": only where a verdict does rest on one."""
    used = [STEPLESS_BASES[b] for b in STEPLESS_BASES
            if any(v.get("basis") == b and v.get("speedup") is not None for v in doc.get("verdict") or [])]
    if not used:
        return " No verdict has a speedup to rest on (What to do says what would decide it)."
    return f" The verdict rests on {_joined(used)}."


def _single_request_remark(doc: dict) -> str:
    """Name the deployments whose rounds come from one request: their accept length has no interval."""
    single = [d["deployment_id"] for d in doc["deployments"] if d["method"] != "none" and single_request(d)]
    if not single:
        return ""
    one = len(single) == 1
    return (f"\n{_joined(single)} {'rests' if one else 'rest'} on 1 request{'' if one else ' each'}: not enough "
            "data for an interval (every resample of one request is that request) and below every floor of "
            f"`[evidence]`, so {'its accept length has' if one else 'their accept lengths have'} none.\n")


def _joined(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def failed_text(d: dict) -> str:
    """ "30 (5.0%)": failed requests and their share of the deployment's requests."""
    if d.get("failed_requests") is None:
        return DASH
    return f"{d['failed_requests']:,} ({pct(d.get('failed_share'))})"


def _ledger(doc: dict) -> str:
    rounds = [(d["deployment_id"], num(d["round_ms"]["mean"]), num(d["round_ms"]["draft"]),
               num(d["round_ms"]["verify"]), num(d["round_ms"]["other"]), pct(d["prefill_round_share"]))
              for d in doc["deployments"]]
    body = [(r["deployment_id"], r["batch_bucket"], num(r["num_rounds"]), num(r["draft_ms"]), num(r["verify_ms"]),
             num(r["other_ms"]), num(r["round_ms"]), num(r["tokens_per_round"]), num(r["t0_ms"]),
             num(r["break_even_ms"]), num(r["condition_holds"]))
            for r in doc["round_ledger"]]
    return ("## 2. Round ledger against the baseline\n\n"
            "A round costs draft + verify + other. Mean ms per round, over every round with a step "
            "(prefill steps included):\n\n"
            + table(["deployment", "round ms", "draft", "verify", "other", "prefill-step rounds"], rounds)
            + "\nDecode-only rounds per batch bucket. The speedup condition is E[T_round] < t0 · E[L]: a round "
              "must take less than the break-even time t0 · tokens/round that plain decoding needs for "
              "the same tokens.\n\n"
            + table(["deployment", "batch", "rounds", "draft", "verify", "other", "round ms", "tokens/round",
                     "t0 ms/token", "break-even ms", "condition holds"], body))


def _positions(doc: dict) -> str:
    parts = ["## 3. Acceptance by draft position\n\n"
             "Survival is Pr(K ≥ i) among rounds that drafted position i; conditional is a_i; "
             "marginal gain Π a_j is what position i adds to E[L] per round (ΔE[L] = Pr(K ≥ i)).\n"]
    for d in _spec(doc):
        if not d["positions"]:
            continue
        body = [(num(p["position"]), num(p["drafted"]), num(p["accepted"]), pct(p["survival"]),
                 pct(p["conditional"]), pct(p["vllm_rate"]), num(p["marginal_gain"]))
                for p in d["positions"]]
        parts.append(f"\n### {d['deployment_id']}\n\n"
                     + table(["position", "drafted", "accepted", "survival", "conditional", "vLLM rate",
                              "marginal gain"], body))
    return "".join(parts)


def _truncation(doc: dict) -> str:
    body = [(d["deployment_id"], num(d["num_rounds"]), num(d["truncated_rounds"]), num(d["truncated_tokens"]),
             pct(d["truncated_rounds"] / d["num_rounds"] if d["num_rounds"] else None, 2))
            for d in _spec(doc)]
    return ("## 4. Stop truncation\n\n"
            "Rounds cut short by EOS, a stop string or the length limit commit fewer than K + 1 tokens.\n\n"
            + table(["deployment", "rounds", "truncated rounds", "truncated tokens", "share of rounds"], body))


def _structured(doc: dict) -> str:
    body = [(r["deployment_id"], "yes" if r["structured_output"] else "no", num(r["num_rounds"]),
             num(r["proposed_tokens"]), num(r["invalidated_tokens"]), pct(r["invalidation_rate"]),
             num(r["mean_accept_length"]), num(r["fully_invalidated_rounds"]))
            for r in _spec_rows(doc, doc["structured_output"])]
    return ("## 5. Structured-output invalidation\n\n"
            "Drafts the grammar removed before verification; fully invalidated rounds lost every draft.\n\n"
            + table(["deployment", "structured", "rounds", "proposed", "invalidated", "invalidation rate",
                     "accept length", "fully invalidated rounds"], body))


def _curve_table(items: list[dict], key: str, label: str) -> str:
    with_intervals = any(r.get("speedup_interval") for r in items)

    def speedup(r: dict) -> str:
        if with_intervals and r.get("speedup_interval") and not is_missing(r["speedup"]):
            return with_interval(r["speedup"], *r["speedup_interval"], suffix="×")
        return times(r["speedup"])

    body = [(r["deployment_id"], r[key], num(r["num_rounds"]), num(r["mean_accept_length"]),
             num(r["tokens_per_round"]), num(r["round_ms"]), num(r["t0_ms"]), speedup(r),
             *([pct(r.get("matched_share"))] if with_intervals else []), num(r["condition_holds"]))
            for r in items]
    return table(["deployment", label, "rounds", "accept length", "tokens/round", "round ms", "t0 ms",
                  "speedup", *(["matched"] if with_intervals else []), "condition holds"], body)


def _load_curve(doc: dict) -> str:
    return ("## 6. Load curve by batch bucket\n\n"
            "Decode-only rounds. As batches grow, plain decoding uses the idle compute that speculation "
            "relied on, and verifying drafts starts to compete with other requests. t0 is the baseline's time "
            "per token at the batch sizes and contexts the deployment's steps in the bucket ran at (each step "
            "matched at its own, between the loads the baseline measured), so a bucket's speedup adds the same "
            "steps as the headline; matched is the share of the bucket's tokens in steps the baseline's loads "
            "cover, and the speedup carries its 95% interval.\n\n"
            + _curve_table(doc["load_curve"], "batch_bucket", "batch") + _iteration_curve(doc))


def _iteration_curve(doc: dict) -> str:
    """The speedup per batch bucket of deployments without rounds, from their steps' own token
    counts (engine iteration lines): the same sums as their headline, bucket by bucket."""
    body = [(d["deployment_id"], r["batch_bucket"], num(r["units"]), num(r["tokens"]),
             with_interval(r["speedup"], *r["interval"], suffix="×") if r.get("interval") else times(r["speedup"]))
            for d in doc["deployments"] for r in ((d.get("matched") or {}).get("steps") or {}).get("by_batch") or []]
    if not body:
        return ""
    return ("\nFrom iteration lines (deployments without rounds: each decode step's own token counts, matched "
            "at its batch size):\n\n"
            + table(["deployment", "batch", "decode steps", "committed tokens", "speedup"], body))


def _latency(doc: dict) -> str:
    baseline_of = {d["deployment_id"]: d["baseline_id"] for d in doc["deployments"]}
    latency = {d["deployment_id"]: d["latency_ms"] for d in doc["deployments"]}
    body = []
    for d in doc["deployments"]:
        dep = d["deployment_id"]
        for metric, stats in d["latency_ms"].items():
            base = latency.get(baseline_of.get(dep) or "", {}).get(metric, {})
            body.append((dep, metric, num(stats["mean"], 1), num(stats["p50"], 1), num(stats["p95"], 1),
                         num(stats["p99"], 1), num(stats["max"], 1), num(base.get("p99"), 1)))
    if not body:
        return ""
    return ("## 7. Latency (ms)\n\n"
            "TTFT includes queueing and prefill. TPOT is the mean time per token after the first. "
            "ITL is the gap between streamed chunks: one round can emit several tokens at once, so a lower "
            "TPOT does not guarantee smoother streaming. Max stall is each request's longest gap.\n\n"
            + table(["deployment", "metric", "mean", "p50", "p95", "p99", "max", "baseline p99"], body))


def _categories(doc: dict) -> str:
    body = [(r["deployment_id"], r["category"], num(r["num_requests"]), num(r["mean_accept_length"]),
             pct(r["acceptance_rate"]), num(r["tokens_per_round"]), times(r["speedup"]),
             num(r.get("repeat_ratio")), num(r.get("prompt_copy_ratio")), num(r.get("repeat_accept_correlation"), 2))
            for r in _spec_rows(doc, doc["categories"])]
    n = doc["repetition"][0]["repeat_n"] if doc.get("repetition") else 3
    parts = ["## 8. Categories and repetition\n\n"
             "\"Code is good, chat is bad\" is a label, not an explanation. What explains acceptance is how much "
             f"the output repeats its context: repeat ratio is the share of output tokens whose {n} preceding "
             f"tokens and itself occurred earlier (an n-gram copier could have drafted them), prompt copy the "
             "share found in the prompt, and r the correlation across requests of repeat ratio with the "
             "request's accept length.\n\n",
             table(["deployment", "category", "requests", "accept length", "acceptance", "tokens/round", "speedup",
                    "repeat ratio", "prompt copy", "r"], body)]
    spread = [q for q in doc.get("repetition_quartiles") or [] if q["mean_accept_length"] is not None]
    if spread:
        grouped: dict[tuple, dict[int, dict]] = defaultdict(dict)
        for q in spread:
            grouped[(q["deployment_id"], q["category"])][q["quartile"]] = q
        rows = []
        for (dep, category), quartiles in grouped.items():
            cells = []
            for k in (1, 2, 3, 4):
                q = quartiles.get(k)
                cells.append(DASH if q is None else
                             f"{num(q['mean_accept_length'], 2)} ({num(q['repeat_ratio_min'], 2)}–"
                             f"{num(q['repeat_ratio_max'], 2)})")
            rows.append((dep, category, *cells))
        parts.append("\nWithin each category, requests ranked by repeat ratio into quartiles: accept length "
                     "(repeat ratio range). A rising row means the text's structure, not its label, drives "
                     "acceptance.\n\n")
        parts.append(table(["deployment", "category", "Q1 (least repetitive)", "Q2", "Q3", "Q4 (most)"], rows))
    return "".join(parts)


NULL_SLICE = "(null)"
SLICE_HEADERS = ("deployment", "value", "requests", "accept length", "acceptance", "tokens/round", "speedup",
                 "repeat ratio", "r")


def slice_tables(doc: dict) -> list[tuple[str, list[tuple]]]:
    """Each --by column with its table body, as both renderers show it; the null value is its own slice."""
    return [(s["column"],
             [(r["deployment_id"], NULL_SLICE if r["value"] is None else r["value"], num(r["num_requests"]),
               num(r["mean_accept_length"]), pct(r["acceptance_rate"]), num(r["tokens_per_round"]),
               times(r["speedup"]), num(r["repeat_ratio"]), num(r["repeat_accept_correlation"], 2))
              for r in s["rows"]])
            for s in doc.get("slices") or []]


def _slices(doc: dict) -> str:
    tables = slice_tables(doc)
    if not tables:
        return ""
    parts = ["## Slices\n\n"
             "The metrics of the categories table for each value of a requests column (`--by`); a request "
             f"whose value is null, or that has no requests row, is in the slice {NULL_SLICE}. Speedup weighs "
             "each batch bucket's tokens by the deployment's matched t0 there (the baseline's time per token at "
             "the batch sizes and contexts its steps in the bucket ran at).\n"]
    for column, body in tables:
        parts.append(f"\n### By {cell(column)}\n\n")
        parts.append(table(SLICE_HEADERS, body) if body else "No request with a clean round.\n")
    return "".join(parts)


def _context(doc: dict) -> str:
    if not doc["context_curve"]:
        return ""
    return ("## 9. Context length\n\n"
            "Longer contexts make every verified position's attention dearer; t0 is matched on batch and "
            "context bucket where the baseline has rounds there. " + context_remark(doc["context_curve"]) + "\n\n"
            + _curve_table(doc["context_curve"], "context_bucket", "context"))


def context_remark(curve: list[dict]) -> str:
    """What confounds the context curve: each bucket's rows ran at their own batch sizes.
    Names the deployments whose round time falls from the shortest to the longest context
    bucket, which dearer attention cannot explain."""
    from ..analysis.buckets import labels

    order = {label: i for i, label in enumerate(labels("context"))}
    by_dep: dict[str, list[dict]] = defaultdict(list)
    for row in curve:
        if not is_missing(row["round_ms"]) and row["context_bucket"] in order:
            by_dep[row["deployment_id"]].append(row)
    falling = []
    for dep, rows in by_dep.items():
        rows = sorted(rows, key=lambda r: order[r["context_bucket"]])
        if len(rows) > 1 and rows[-1]["round_ms"] < rows[0]["round_ms"]:
            falling.append(dep)
    text = ("The rows are not at equal load: each context bucket ran at its own mix of batch sizes, so a "
            "difference between rows mixes context length with batch size.")
    if falling:
        who = "every deployment" if len(falling) == len(by_dep) else ", ".join(falling)
        text += (f" Round time falls from the shortest to the longest context bucket for {who}: dearer "
                 "attention cannot explain that, smaller batches at the longer contexts can.")
    return text


def _trees(doc: dict) -> str:
    body = [(d["deployment_id"], d["method"], num(d["nodes_per_round"]), num(d["accepted_per_node"]),
             num(d["mean_accept_length"]))
            for d in _spec(doc)]
    return ("## 10. Depth and width\n\n"
            "Nodes verified per speculative round and accepted tokens per verified node: a tree buys "
            "acceptance with width, and every unchosen node is computed too.\n\n"
            + table(["deployment", "method", "nodes/round", "accepted/node", "accept length"], body))


def _capacity(doc: dict) -> str:
    body = [(d["deployment_id"], num(c["completed_requests"]), num(c["failed_requests"]),
             num(c["preemptions_per_request"]), pct(c["kv_usage_mean"]), pct(c["kv_usage_max"]),
             pct(c["candidate_kv_share"], 2), num(c["output_tokens_per_busy_s"], 0), peak_hour_text(c))
            for d in doc["deployments"] for c in [d["capacity"]]]
    parts = ["## 11. Capacity\n\n"
             "Drafts occupy KV (≈ B·γ tokens per step) and can cause preemptions: a faster round does not "
             "guarantee faster requests. Busy tok/s is the tokens committed per second of step time (the "
             "engine's throughput while it works); peak-hour tok/s, those committed in the busiest clock hour "
             "÷ 3600 s (what the traffic asked of it).\n\n",
             table(["deployment", "completed", "failed", "preemptions/request", "KV mean", "KV max",
                    "draft KV share", "busy tok/s", "peak-hour tok/s (hour)"], body), _peak_hour_remark(doc)]
    by_batch = {d["deployment_id"]: {b["batch_bucket"]: b for b in d["capacity"].get("by_batch") or []}
                for d in doc["deployments"]}
    buckets = [b for b in BATCH_BUCKETS if any(b in cells for cells in by_batch.values())]
    if buckets:
        per_gpu = all(b["num_gpus"] for cells in by_batch.values() for b in cells.values())
        unit = "output tokens per second per GPU" if per_gpu else "output tokens per second (per GPU where tensor_parallel_size is known)"
        rows = []
        for dep, cells in by_batch.items():
            if not cells:
                continue
            row = [dep]
            for bucket in buckets:
                c = cells.get(bucket)
                if c is None:
                    row.append(DASH)
                    continue
                rate = c["output_tokens_per_gpu_s"] if c["num_gpus"] else c["output_tokens_per_busy_s"]
                row.append(f"{num(rate, 0)} ({pct(c['time_share'], 0)})")
            rows.append(row)
        parts.append(f"\nBy batch bucket: {unit} while busy, and (in brackets) the share of the deployment's "
                     "busy time spent in the bucket.\n\n")
        parts.append(table(["deployment", *buckets], rows))
    return "".join(parts)


def peak_hour_text(c: dict) -> str:
    """ "7.2 (2026-11-27 13:00)": the busiest clock hour's rate and the hour it was."""
    if is_missing(c.get("peak_hour_output_tokens_per_s")):
        return DASH
    hour = c.get("peak_hour")
    when = f" ({str(hour)[:13].replace('T', ' ')}:00)" if hour else ""
    return f"{num(c['peak_hour_output_tokens_per_s'], 1)}{when}"


def _peak_hour_remark(doc: dict) -> str:
    """Deployments that served the same requests show the same peak-hour rate when that hour's
    tokens were all committed within it: then the figure is the traffic's demand, not a
    capacity, and the report says so rather than let it read as a tie."""
    shown = {peak_hour_text(d["capacity"]) for d in doc["deployments"]
             if not is_missing(d["capacity"].get("peak_hour_output_tokens_per_s"))}
    if len(doc["deployments"]) > 1 and len(shown) == 1:
        return ("\nEvery deployment shows the same peak-hour rate: they served the same requests, and each "
                "committed that hour's tokens within the hour, so the figure measures the traffic (what it "
                "asked of the engine), not the engine's capacity; busy tok/s compares engines.\n")
    return ""


def _temperature(doc: dict) -> str:
    if not doc["temperature"]:
        return ""
    body = [(r["deployment_id"], r["temperature_bucket"], num(r["num_requests"]), num(r["mean_accept_length"]),
             pct(r["acceptance_rate"]), num(r["tokens_per_round"]))
            for r in _spec_rows(doc, doc["temperature"])]
    return ("## 12. Temperature\n\n"
            + table(["deployment", "temperature", "requests", "accept length", "acceptance", "tokens/round"],
                    body))


def _tuning(doc: dict) -> str:

    tuning = doc.get("tuning")
    if not tuning or not tuning["recommendations"]:
        return ""
    returns = {(m["deployment_id"], m["batch_bucket"]): m for m in tuning["marginal_returns"]}
    parts = ["## 13. Speculation length\n\n"
             "Each extra draft position adds ΔE[L] = Pr(K ≥ i) tokens per round, less and less (a^i in the "
             "fixed-a model), while every position costs draft and verify time. A position pays while "
             "E[L](i)/T(i) > E[L](i−1)/T(i−1). The search predicts the best γ, t0 · E[L](γ) / T_round(γ), per batch "
             "bucket; a bucket gets k > 0 only where its measured speedup is above 1 by its 95% interval, on at "
             "least min_bucket_share of the tokens (evidence: pays), k = 0 where it is below (loses) or the "
             "baseline never ran there (no_baseline), and an undecided bucket keeps k > 0 only between two that "
             "pay. `specan recommend TRACES --deployment ID --format md` shows every γ. Each deployment's vLLM "
             "config line is its one config. Its 'by context length' table repeats the procedure within each context "
             "bucket (E[L] from that bucket's acceptance, round cost from its steps, t0 matched on batch and "
             "context) and shows what each context would want; `specan recommend --by-context` shows its inputs.\n"]
    for rec in tuning["recommendations"]:
        dep = rec["deployment_id"]
        config = rec["num_speculative_tokens_per_batch_size"]
        parts.append(f"\n### {dep}\n\n")
        # a method vLLM documents no per-batch config for keeps its one length (as the verdict offers it)
        single = not per_batch_documented(rec.get("method"))
        if config and single:
            parts.append(f"vLLM config: `\"num_speculative_tokens\": {rec['num_speculative_tokens']}`, as "
                         f"configured. The lengths per batch size below, `\"num_speculative_tokens_per_batch_size\": "
                         f"{config}`, use an option {DYNAMIC_SD_TESTED}; {dep} uses method {rec['method']}.\n\n")
        elif config:
            parts.append(f"vLLM config: `\"num_speculative_tokens_per_batch_size\": {config}`\n\n")
        capped = rec.get("config_speedup")
        if capped and capped.get("speedup") is not None:
            parts.append(f"With {'those lengths' if single else 'that config'}, on the same steps: "
                         f"{with_interval(capped['speedup'], *(capped['interval'] or (None, None)), suffix='×')} "
                         f"(speculation off at batch {', '.join(f'{a}-{b}' for a, b in capped['off'])}).\n\n")
        body = []
        for b in rec["buckets"]:
            # where the fit serves no γ, the bucket has no fitted prediction and no R² to show;
            # where γ never varied, the speedup at k is the measured one
            paying = returns.get((dep, b["batch_bucket"]), {}).get("largest_paying_gamma")
            body.append((b["batch_bucket"], ", ".join(map(str, b["observed_gamma"])) or DASH,
                         measured_with_interval(b), b.get("evidence") or DASH, num(b.get("predicted_best")),
                         num(b["recommended"]), speedup_at_k(b), num(b["fit_r2"]), num(paying),
                         b.get("why_k") or b["why"]))
        parts.append(table(["batch", "observed γ", "measured speedup", "evidence", "predicted best γ",
                            "recommended k", "speedup at k", "fit R²", "largest paying γ", "why"], body))
        first = next((m for m in tuning["marginal_returns"] if m["deployment_id"] == dep and
                      any(p["delta_round_ms"] is not None for p in m["positions"])), None)
        if first:
            rows = [(num(p["position"]), num(p["marginal_gain"]), num(p["expected_length"]),
                     num(p["delta_round_ms"]), p["source"] or DASH, num(p["pays"]))
                    for p in first["positions"]]
            parts.append(f"\nDiminishing returns at batch {first['batch_bucket']}: what position i adds "
                         "against what it costs.\n\n"
                         + table(["position i", "ΔE[L]", "E[L](i)", "ΔT ms", "cost from", "pays"], rows))
        if rec["notes"]:
            parts.append("\n" + "\n".join(f"- {n}" for n in rec["notes"]) + "\n")
        if rec.get("by_context"):
            parts.append(f"\n#### {dep} by context length\n\n" + by_context_markdown(rec))
    return "".join(parts)


BENCHMARK_MARK = " (benchmark)"


def _intervals(doc: dict) -> str:
    # a baseline drafts nothing: the acceptance tables leave it out, the logs speedup shows it
    rows = _spec_rows(doc, doc.get("intervals") or [])
    logs = _log_speedup(doc)
    if not rows and not logs:
        return ""
    text = "## Aggregate counters (intervals)\n\n"
    if rows:
        # a benchmark's rows are marked in the hour cell: they are its traffic, not production
        body = [(r["deployment_id"], str(r["hour"]) + (BENCHMARK_MARK if r.get("benchmark") else ""),
                 num(r["num_intervals"]), num(r["num_drafts"]),
                 num(r["num_draft_tokens"]), num(r["num_accepted_tokens"]), num(r["mean_accept_length"]),
                 pct(r["drafts_share"]), pct(r["acceptance_rate"]),
                 ", ".join(pct(v) for v in r["vllm_rate"]) if r["vllm_rate"] else DASH,
                 num(r["mean_reported_accept_length"], 2), num(r["mean_running_requests"], 1))
                for r in rows]
        text += ("From engine logs (vLLM, SGLang), Prometheus counters or benchmark summaries, per hour. "
                 "Accept length is "
                 "1 + accepted / drafts over the intervals with a draft count (\"drafts known\": the share of "
                 "draft tokens in them). vLLM prints its mean acceptance length to 2 decimals, so a draft count "
                 "derived from it is approximate (see the notes).\n\n"
                 + table(["deployment", "hour", "intervals", "drafts", "draft tokens", "accepted", "accept length",
                          "drafts known", "acceptance", "vLLM rate per position", "engine's accept length",
                          "running reqs"], body))
        several = [r for r in rows if r.get("other_sources")]
        if several:
            text += ("\nAn hour that several sources count is counted from one, the most detailed (an engine's "
                     "log, then its responses, then Prometheus): they count the same drafts, and \"Channels "
                     "agree?\" compares them. " + "; ".join(
                         f"{r['deployment_id']} {r['hour']}: {r['source']} (not {', '.join(r['other_sources'])})"
                         for r in several[:5]) + (f"; and {len(several) - 5} more hours" if len(several) > 5 else "")
                     + ".\n")
        if any(r.get("benchmark") for r in rows):
            text += (f"\nRows marked{BENCHMARK_MARK} are benchmark runs (`vllm bench serve`, SGLang "
                     "`bench_serving`; intervals source vllm_bench, sglang_bench): the totals of the benchmark's "
                     "own traffic, not production. They are kept apart from production counters of the same "
                     "hour and enter neither the acceptance against load nor the logs speedup.\n")
    load = _spec_rows(doc, doc.get("interval_load") or [])
    definitions = sorted({r["reported_accept_length_definition"] for r in rows + load
                          if r.get("reported_accept_length_definition")})
    if definitions:
        text += ("\nThe engine's accept length is the mean of what it printed, rounded as printed, in its own "
                 "definition: " + "; ".join(definitions) + ".\n")
    if load:
        text += ("\nAcceptance against load: intervals grouped by the requests running when they ended "
                 "(the log's `Running: N reqs`, a batch-size proxy).\n\n"
                 + table(["deployment", "running reqs", "intervals", "draft tokens", "accept length",
                          "drafts known", "acceptance", "engine's accept length", "gen tokens/s", "KV usage"],
                         [(r["deployment_id"], r["batch_bucket"], num(r["num_intervals"]),
                           num(r["num_draft_tokens"]), num(r["mean_accept_length"]), pct(r["drafts_share"]),
                           pct(r["acceptance_rate"]), num(r["mean_reported_accept_length"], 2),
                           num(r["mean_generation_tokens_per_s"], 1), pct(r["mean_kv_cache_usage"])) for r in load]))
    return text + logs


def _difference(row: dict, key: str) -> str:
    value = None if row["is_reference"] else row[key]
    return DASH if value is None else f"{value * 100:+.1f} %"


def _channel_check(row: dict) -> str:
    if row["disagrees"]:
        return "disagrees" + (" (reaches beyond the span)" if row["extends_beyond_span"] else "")
    if not row["has_common_span"]:
        return "no common span"
    return DASH if row["is_reference"] else "agrees"


def _reconciliation(doc: dict) -> str:
    rows = doc.get("reconciliation") or []
    if not rows:
        return ""
    body = [(r["deployment_id"], r["channel"] + (" (reference)" if r["is_reference"] else ""), num(r["num_rows"]),
             num(r["accepted"]), num(r["drafted"]), num(r["drafts"]), pct(r["acceptance_rate"]),
             num(r["mean_accept_length"]),
             ", ".join(str(v) for v in r["accepted_per_position"]) if r["accepted_per_position"] else DASH,
             _difference(r, "accepted_difference"), _difference(r, "drafted_difference"), _channel_check(r))
            for r in rows]
    spans = sorted({(r["deployment_id"], str(r["span_start"]), str(r["span_end"])) for r in rows
                    if r["has_common_span"]})
    return ("## Channels agree?\n\n"
            "An engine counts its drafts in several places: its log, each response's timings, its Prometheus "
            "counters, and the rounds rebuilt from them. Per deployment with two or more, each channel's totals "
            "over the time span all of them cover (widened by 1 s for clocks that differ), against the most "
            "detailed channel (rounds, then the log, the responses, Prometheus). More than 1 % apart in accepted "
            "or drafted tokens, in the mean accept length or in a position's accepted count disagrees.\n\n"
            + table(["deployment", "channel", "rows", "accepted", "drafted", "drafts", "acceptance",
                     "accept length", "accepted per position", "Δ accepted", "Δ drafted", "check"], body)
            + ("\nCommon spans: " + "; ".join(f"{d} {a} – {b}" for d, a, b in spans) + ".\n" if spans else ""))


def _running(loads: list[float] | None) -> str:
    """A side's least and most running requests, "8-10" (or one count, or a dash)."""
    if not loads:
        return DASH
    low, high = (f"{v:g}" for v in loads)
    return low if low == high else f"{low}-{high}"


def _log_speedup(doc: dict) -> str:
    """The speedup from engine logs alone (basis: logs) and its curve over the running-request buckets."""
    spec = [d for d in _spec(doc) if d.get("log_speedup_evidence") is not None]
    if not spec:
        return ""
    floor = spec[0]["log_speedup_evidence"]["min_intervals"]
    body = [(d["deployment_id"], d["baseline_id"] or DASH, with_interval_of(d, "log_speedup", "×"),
             pct(d["log_speedup_coverage"]), num(e["intervals"]), _running(e["loads"]), num(e["baseline_intervals"]),
             _running(e["baseline_loads"]), e["note"] or "")
            for d in spec for e in [d["log_speedup_evidence"]]]
    text = ("\nSpeedup from the engine logs (basis: logs): each of the deployment's usable log intervals (a "
            "start, a throughput, running requests above 0) is matched with the baseline's seconds per generated "
            "token at its own running-request count, interpolated between the counts the baseline logged at "
            f"least {floor} time{'s' if floor != 1 else ''}; the seconds the baseline would take for the "
            "deployment's tokens, summed and divided by the seconds the deployment took. Coverage is the share "
            "of the deployment's logged tokens in matched intervals; the interval is a 95% block jackknife over "
            "both sides' intervals in time order.\n\n"
            + table(["deployment", "baseline", "logs speedup", "coverage", "matched intervals", "running reqs",
                     "baseline intervals", "baseline running reqs", "why not"], body))
    curve = [r for r in doc.get("log_load_curve") or [] if r["deployment_id"] in {d["deployment_id"] for d in spec}]
    if curve:
        text += ("\nBy bucket of running requests: generation tokens per second of each (from the intervals "
                 "logged there) and their ratio; \"counted\" says whether the bucket enters the speedup.\n\n"
                 + table(["deployment", "running reqs", "intervals", "gen tokens/s", "baseline intervals",
                          "baseline gen tokens/s", "speedup", "counted"],
                         [(r["deployment_id"], r["batch_bucket"], num(r["num_intervals"]),
                           num(r["generation_tokens_per_s"], 1), num(r["baseline_intervals"]),
                           num(r["baseline_generation_tokens_per_s"], 1), times(r["speedup"]), num(r["counted"]))
                          for r in curve]))
    return text


def _quantization(doc: dict) -> str:

    return render_quant_markdown(doc["quantization"]) if doc.get("quantization") else ""


ANOMALIES_SHOWN = 20

# What each kind of flagged request usually means (one line each in the report).
ANOMALY_MEANINGS = {
    "looping": "a generation stuck repeating itself until its length limit (often greedy or low-temperature "
               "decoding); its drafts are easy to accept, so it flatters acceptance",
    "no_acceptance": "garbled output, or a draft mismatched to this request's traffic (tokenizer, chat template, "
                     "language): the draft never matches it, though it matches the deployment's other requests",
    "stall": "a preemption, a long prefill batched with the request, or a pause of the serving process: one "
             "streaming pause far beyond the deployment's usual",
}


def anomaly_rule(kind: str, t: dict) -> str:
    """The rule of one kind with the thresholds in force, in words."""
    return {
        "looping": f"output_tokens ≥ {t['looping_min_output_tokens']:g} and self_repeat_ratio({t['repeat_n']}) ≥ "
                   f"{t['looping_min_self_repeat_ratio']:g}",
        "no_acceptance": f"≥ {t['no_acceptance_min_spec_rounds']:g} speculative rounds and 0 accepted drafts, on a "
                         f"deployment whose acceptance_rate ≥ {t['no_acceptance_min_deployment_acceptance']:g}",
        "stall": f"max_stall ≥ {t['stall_min_ms']:g} ms and ≥ {t['stall_min_median_multiple']:g} × the "
                 "deployment's median max_stall",
    }[kind]


def anomaly_value(kind: str, value: Any) -> str:
    if kind == "no_acceptance" and not is_missing(value):
        return f"{value:,.0f}"
    return num(value, 1 if kind == "stall" else 3)


def request_table(headers: list[str], listed: list[dict], cells: Callable[[dict], tuple]) -> str:
    """A table naming requests: deployment, request and, when the requests are partitioned,
    the partition that tells requests of the same id apart (ids may restart per date)."""
    partitioned = any(r.get("partition") for r in listed)
    named = ["deployment", "request"] + (["partition"] if partitioned else [])
    return table(named + headers,
                 [(r["deployment_id"], r["request_id"], *((r["partition"] or DASH,) if partitioned else ()),
                   *cells(r)) for r in listed])


def _requests(n: int) -> str:
    return f"{n:,} request{'' if n == 1 else 's'}"


def _anomalies(doc: dict) -> str:
    if "anomalies" not in doc:
        return ""
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for a in doc["anomalies"]:
        by_kind[a["kind"]].append(a)
    checked: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for c in doc["anomaly_checks"]:
        checked[c["kind"]][0] += c["checked"]
        checked[c["kind"]][1] += c["num_requests"]
    # without requests rows the requests a rule checks are the ones the rounds name
    from_rounds = (doc.get("input") or {}).get("requests") == 0
    parts = ["## Requests to look at\n",
             f"Requests that one of three rules flags, the top {ANOMALIES_SHOWN} of each kind by value "
             "(view `request_anomalies`; thresholds from the `[anomalies]` section of `--config`).\n"]
    for kind in ANOMALY_MEANINGS:
        flagged = by_kind.get(kind, [])
        done, total = checked[kind]
        known = " (known from the rounds alone: no requests rows)" if from_rounds and done else ""
        parts.append(f"### {kind}: {len(flagged):,} flagged of {_requests(done)} checked{known}\n\n"
                     f"Rule: {anomaly_rule(kind, doc['anomaly_thresholds'])}. It usually means "
                     f"{ANOMALY_MEANINGS[kind]}.\n")
        if total > done:
            parts.append(f"{_requests(total - done)} could not be checked (see the notes).\n")
        if flagged:
            shown = flagged[:ANOMALIES_SHOWN]
            parts.append(request_table(["value", "threshold", "detail"], shown,
                                       lambda a: (anomaly_value(kind, a["value"]),
                                                  anomaly_value(kind, a["threshold"]), a["detail"])))
            if len(flagged) > len(shown):
                parts.append(f"{len(flagged) - len(shown):,} more in the JSON key `anomalies`.\n")
    return "\n".join(parts)


def _gates(doc: dict) -> str:
    return render_gates_markdown(doc.get("gates", []))


def _notes(doc: dict) -> str:
    # the bootstrap's note on the replicates an interval rests on (analysis.metrics) would speak of an
    # interval the report does not show for a single request
    single = tuple(f"{d['deployment_id']}: the mean accept length interval rests on " for d in doc["deployments"]
                   if single_request(d))
    notes = [n for n in doc["notes"] if not (single and n.startswith(single))]
    if not notes:
        return ""
    return "## Notes\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
