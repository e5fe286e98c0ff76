"""The verdict lines that open the report, the digits an interval supports, and the
bootstrap intervals of the headline numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyzer import api
from analyzer.analysis.precision import supported_decimals, with_interval
from analyzer.analysis.config import Config
from analyzer.decide.evidence import speedup_evidence
from analyzer.decide.verdict import any_blocked, check_failures, shared_findings, verdicts
from tracebuilder import deployment, request, round_row, step, write_traces


# --------------------------------------------------------------------------- digits

def test_the_interval_decides_the_decimals():
    assert supported_decimals(1.1645, 1.2262) == 2        # ±0.031: the second decimal
    assert supported_decimals(2.0, 2.4) == 1              # ±0.2
    assert supported_decimals(1.0, 1.002) == 3            # ±0.001
    assert supported_decimals(10.0, 70.0) == 0            # ±30: no decimal
    assert supported_decimals(None, None) == 2            # no interval: the default
    assert supported_decimals(1.5, 1.5) == 3              # no spread: as many as allowed
    assert with_interval(1.1902639680999507, 1.1644831160082207, 1.2261756394695347, suffix="×") \
        == "1.19× [1.16, 1.23]"
    assert with_interval(2.5978, None, None) == "2.60"


# --------------------------------------------------------------------------- verdicts

def chk(name, value, threshold, status, baseline_value=None, reason=None, **extra):
    return {"name": name, "value": value, "threshold": threshold, "baseline_value": baseline_value,
            "status": status, "reason": reason, **extra}


def gate(dep, name, *checks):
    statuses = {c["status"] for c in checks}
    status = ("fail" if "fail" in statuses else "unknown" if "unknown" in statuses else
              "shared" if "shared" in statuses else "pass")
    return {"deployment_id": dep, "gate": name, "status": status, "reason": None, "checks": list(checks)}


def speed(dep, status, value=1.19, reason=None):
    return gate(dep, "capacity", chk("speedup", value, 1.0, status, reason=reason))


# what a deployment entry's matched comparison says of its rounds: matched on context too
CONTEXT = {"matched": {"rounds": {"context_known": True}}}


def spec(dep, speedup, interval=None, coverage=0.9, baseline="base", requests=600, steps=True, **extra):
    return {"deployment_id": dep, "method": "eagle", "num_speculative_tokens": 4, "baseline_id": baseline,
            "model": "m", "target_quant": "bf16", "speedup": speedup, "speedup_interval": interval,
            "speedup_coverage": coverage, "num_requests": requests,
            "round_ms": {"mean": 10.0 if steps else None}, "tpot_speedup": None, **extra}


BASE = {"deployment_id": "base", "method": "none", "num_speculative_tokens": 0, "baseline_id": None,
        "speedup": None, "num_requests": 600, "round_ms": {"mean": 9.0}}


def decide(deployments, gates, ranges=None, recs=None, **doc):
    """The verdicts of a document of ``deployments`` and ``gates``; ``ranges``: each deployment's
    recommended config, ``recs``: more keys of its recommendation (config_speedup, buckets)."""
    full = {"deployments": deployments, "gates": gates,
            "tuning": {"recommendations": [{"deployment_id": dep, "num_speculative_tokens_per_batch_size": r,
                                            **(recs or {}).get(dep, {})}
                                           for dep, r in (ranges or {}).items()]}, **doc}
    full["verdict"] = verdicts(full, speedup_evidence(full), Config())
    return full, {v["deployment_id"]: v for v in full["verdict"]}


def test_speculation_that_worsens_a_latency_check_is_not_shipped():
    # the checks as the latency gate makes them (decide.gates): the stall, 890 ms [820, 960]
    # past 250, is 890 / 355 = 2.51× base's at the same load, the ratio's interval [2.2, 2.8]
    # above 1 + 25 %: it blocks. TTFT 4,352 [4,100, 4,600] misses 2,000 and so does base's
    # 3,597 [3,300, 3,900] at the same load, the ratio 1.21 [1.10, 1.24] within 1 + 25 %: shared
    stall = chk("max_stall_p99_ms", 890.0, 250.0, "fail", 355.0,
                "2.51× base's at the same load ([2.20, 2.80]), beyond the tolerance of 25%",
                interval=[820.0, 960.0], baseline_interval=[340.0, 370.0], ratio=890 / 355,
                ratio_interval=[2.2, 2.8], matched_share=1.0, worsening=890 / 355 - 1, max_worsening=0.25)
    ttft = chk("ttft_p99_ms", 4352.0, 2000.0, "shared", 3597.0,
               "base misses it too at the same load (3,597 ms, [3,300, 3,900] ms), within 25%: the service "
               "level, not speculation", interval=[4100.0, 4600.0], baseline_interval=[3300.0, 3900.0],
               ratio=4352 / 3597, ratio_interval=[1.10, 1.24], matched_share=1.0, worsening=4352 / 3597 - 1,
               max_worsening=0.25)
    doc, v = decide([BASE, spec("a", 1.19, [1.16, 1.23])],
                    [gate("a", "latency", ttft, stall), speed("a", "pass"),
                     gate("base", "latency", chk("ttft_p99_ms", 3597.0, 2000.0, "fail"),
                          chk("max_stall_p99_ms", 355.0, 250.0, "fail"))],
                    {"a": [[1, 64, 4], [65, 128, 0]]})
    a = v["a"]
    assert a["action"] == "dont_ship" and a["basis"] == "rounds"
    assert a["text"] == ("Don't ship a: max stall p99 890 ms [820, 960] > 250: 2.51× base's at the same load "
                         "([2.20, 2.80]), beyond the tolerance of 25%. Otherwise it pays, 1.19× [1.16, 1.23] the "
                         "throughput of base at the same batch sizes, on 90% of its tokens (600 requests), with "
                         "`\"num_speculative_tokens_per_batch_size\": [[1, 64, 4], [65, 128, 0]]`.")
    assert a["blocking"] == [{"gate": "latency", "check": "max_stall_p99_ms", "value": 890.0, "threshold": 250.0,
                              "baseline_value": 355.0}]
    assert a["shared"] == [{"gate": "latency", "check": "ttft_p99_ms", "value": 4352.0, "threshold": 2000.0,
                            "baseline_value": 3597.0}]
    assert a["config"] == [[1, 64, 4], [65, 128, 0]]
    assert (a["speedup"], a["speedup_interval"], a["coverage"], a["num_requests"]) == (1.19, [1.16, 1.23], 0.9, 600)
    assert (a["matched_on"], a["not_matched"], a["not_checked"]) == (["load"], [], [])
    # the baseline: nothing to ship, so nothing blocks; what it misses is the service level
    assert v["base"]["action"] == "baseline" and v["base"]["blocking"] == []
    assert [s["check"] for s in v["base"]["shared"]] == ["ttft_p99_ms", "max_stall_p99_ms"]
    assert v["base"]["text"] == ("base is plain decoding, the baseline of a. It misses TTFT p99 3,597 ms > 2,000, "
                                 "max stall p99 355 ms > 250: a service level that holds with or without speculation.")
    assert any_blocked(doc["verdict"])
    # stated once, about the pair: the TTFT both miss; the stall a blocked, so base's own miss is named alone
    assert shared_findings(doc) == [
        "TTFT p99 misses 2,000 ms with or without speculation: 4,352 vs 3,597 ms (a vs base)",
        "base (plain decoding) misses max stall p99 355 ms > 250"]


def test_threshold_missed_where_the_baseline_meets_it_and_failed_requests():
    # TPOT 63.8 ms [62, 66] past 60, which base meets at the same load (58 ms [57, 59]): it blocks
    # though +10 % is within the tolerance
    tpot = chk("tpot_p95_ms", 63.8, 60.0, "fail", 58.0,
               "misses the target, which base meets at the same load (58 ms, [57, 59] ms)",
               interval=[62.0, 66.0], baseline_interval=[57.0, 59.0], ratio=1.1, ratio_interval=[1.05, 1.15],
               matched_share=1.0, worsening=0.1, max_worsening=0.25)
    # 60 of 600 failed against base's 30 of 600. Wilson at z = 1.6449 (z² = 2.7055): 60/600 has
    # centre (0.1 + z²/1200) / (1 + z²/600) = 0.101796 and half-width
    # z·√(0.1·0.9/600 + z²/1,440,000) / (1 + z²/600) = 0.020180, lower 0.081616; 30/600 has
    # upper 0.052020 + 0.014741 = 0.066761. Newcombe's lower bound of the rise:
    # 0.05 − √(0.018384² + 0.016761²) = 0.025122 > 1 point: it blocks
    failed = chk("failed_share", 0.1, 0.01, "fail", 0.05,
                 "the share rose by 2.5% at least (one-sided 95%), more than 1.0%", rise=0.05,
                 rise_interval=[0.025122, 0.075392], n=600, baseline_n=600)
    _, v = decide([BASE, spec("a", 1.3, [1.2, 1.4])],
                  [gate("a", "correctness", failed), gate("a", "latency", tpot), speed("a", "pass")], {"a": []})
    # latency before the failed share (speed first, then latency, then the rest)
    assert [b["check"] for b in v["a"]["blocking"]] == ["tpot_p95_ms", "failed_share"]
    assert v["a"]["text"] == ("Don't ship a: TPOT p95 64 ms [62, 66] > 60: misses the target, which base meets at "
                              "the same load (58 ms, [57, 59] ms); failed requests 10.0% vs 5.0% on base: a rise of "
                              "at least 2.5% (one-sided 95%), more than the 1.0% tolerated.")


def test_too_slow_and_what_would_pay():
    # slower than plain decoding by its interval, and its TPOT past the target that base meets:
    # the speed leads, though the latency gate comes first in the gates' order
    tpot = chk("tpot_p95_ms", 70.0, 60.0, "fail", 50.0,
               "misses the target, which base meets at the same load (50 ms, [48, 52] ms)",
               interval=[66.0, 74.0], baseline_interval=[48.0, 52.0], ratio=1.4, ratio_interval=[1.3, 1.5],
               matched_share=1.0, worsening=0.4, max_worsening=0.25)
    # the config that turns speculation off above 16, on the same steps: 1.136× [1.127, 1.144]
    _, v = decide([BASE, spec("slow", 0.79, [0.77, 0.81], coverage=0.955, **CONTEXT)],
                  [gate("slow", "latency", tpot), speed("slow", "fail", 0.79)], {"slow": [[1, 16, 4], [17, 128, 0]]},
                  {"slow": {"config_speedup": {"speedup": 1.136, "interval": [1.127, 1.144]}}})
    assert v["slow"]["action"] == "dont_ship"
    assert [b["check"] for b in v["slow"]["blocking"]] == ["speedup", "tpot_p95_ms"]
    assert v["slow"]["text"] == (
        "Don't ship slow: 0.79× [0.77, 0.81] the throughput of base at the same batch sizes and contexts, on 96% of "
        "its tokens (600 requests): slower than plain decoding; TPOT p95 70 ms [66, 74] > 60: misses the target, "
        "which base meets at the same load (50 ms, [48, 52] ms). It pays at batch sizes up to 16: "
        "`\"num_speculative_tokens_per_batch_size\": [[1, 16, 4], [17, 128, 0]]` turns speculation off where it "
        "does not (1.136× [1.127, 1.144] on the same steps); measure that config before deciding again.")
    assert (v["slow"]["config_speedup"], v["slow"]["config_speedup_interval"]) == (1.136, [1.127, 1.144])


def test_ship_cap_as_configured_and_not_checked():
    buckets = {
        # cap: pays up to 32, loses at 33-64, no baseline at 65-128: off above 32
        "cap": [{"batch_bucket": "17-32", "evidence": "pays"}, {"batch_bucket": "33-64", "evidence": "loses"},
                {"batch_bucket": "65-128", "evidence": "no_baseline"}],
        # off: loses everywhere it ran; unmeasured: never had a baseline where it ran
        "off": [{"batch_bucket": "1-4", "evidence": "loses"}],
        "unmeasured": [{"batch_bucket": "65-128", "evidence": "no_baseline"}],
    }
    recs = {dep: {"buckets": b} for dep, b in buckets.items()}
    # the capped config's speedup on the same steps: 1.62× [1.58, 1.66]
    recs["cap"]["config_speedup"] = {"speedup": 1.62, "interval": [1.58, 1.66]}
    doc, v = decide([BASE, spec("cap", 1.5, [1.4, 1.6], **CONTEXT), spec("ship", 1.3, [1.27, 1.33]),
                   spec("asis", 1.2, [1.1, 1.3], **CONTEXT), spec("off", 1.1, [1.05, 1.15], **CONTEXT),
                   spec("unmeasured", 1.1, [1.05, 1.15], **CONTEXT)],
                  [speed("cap", "pass"), speed("ship", "pass"), speed("asis", "pass"), speed("off", "pass"),
                   speed("unmeasured", "pass"),
                   gate("ship", "correctness", chk("match_rate", None, 1.0, "unknown", reason="missing"))],
                  {"cap": [[1, 32, 4], [33, 128, 0]], "ship": [[1, 8, 5], [9, 128, 3]], "asis": [],
                   "off": [[1, 128, 0]], "unmeasured": [[1, 128, 0]]}, recs)
    # a cap quotes the capped config's speedup, and what ran in brackets; it names where there is
    # no baseline
    assert (v["cap"]["action"], v["cap"]["text"]) == ("cap", (
        "Ship cap with speculation capped at batch 32, `\"num_speculative_tokens_per_batch_size\": "
        "[[1, 32, 4], [33, 128, 0]]`: 1.62× [1.58, 1.66] the throughput of base at the same batch sizes and contexts, "
        "on 90% of its tokens (600 requests) with that config, on the same steps (as it ran: 1.5× [1.4, 1.6]); no "
        "baseline at batch 65-128: speculation off there until base is measured there."))
    assert (v["cap"]["config_speedup"], v["cap"]["config_speedup_interval"]) == (1.62, [1.58, 1.66])
    assert v["cap"]["matched_on"] == ["load", "context"]
    # without context lengths a shipped line says it is not matched on context; a check left
    # unknown is named, with its reason up to its first clause
    assert (v["ship"]["action"], v["ship"]["text"]) == ("ship", (
        "Ship ship with `\"num_speculative_tokens_per_batch_size\": [[1, 8, 5], [9, 128, 3]]`: 1.30× [1.27, 1.33] "
        "the throughput of base at the same batch sizes, on 90% of its tokens (600 requests). Not matched on context: "
        "the rounds have no context_len. Undecided: match rate (missing)."))
    assert v["ship"]["not_checked"] == ["match_rate"] and v["ship"]["matched_on"] == ["load"]
    assert (v["asis"]["action"], v["asis"]["config"]) == ("ship", None)
    assert v["asis"]["text"] == ("Ship asis as configured (num_speculative_tokens 4): 1.2× [1.1, 1.3] the "
                                 "throughput of base at the same batch sizes and contexts, on 90% of its tokens "
                                 "(600 requests); no per-batch recommendation (no batch range decides on its own; "
                                 "see section Speculation length).")
    # k = 0 everywhere: don't ship where a range loses by its own evidence; inconclusive where
    # none was ever measured against a baseline
    assert v["off"]["action"] == "dont_ship" and v["off"]["config"] == [[1, 128, 0]]
    assert v["off"]["text"] == ("Don't ship off: no batch range pays by its own evidence, though over all of its "
                                "tokens it measured 1.10× [1.05, 1.15] the throughput of base at the same batch sizes "
                                "and contexts, on 90% of its tokens (600 requests); see section Speculation length.")
    assert v["unmeasured"]["action"] == "inconclusive"
    assert ("but no batch range's own speedup decides its length (no baseline at batch 65-128: speculation off there "
            "until base is measured there)") in v["unmeasured"]["text"]
    assert v["unmeasured"]["settle"] == "a baseline at the loads it ran, and more requests at each, would settle it"
    # `--check` passes ship and cap, and names every other speculative deployment (the baseline is none)
    assert [(f["deployment_id"], f["action"]) for f in check_failures(doc["verdict"])] == [
        ("off", "dont_ship"), ("unmeasured", "inconclusive")]


def test_a_method_without_a_documented_per_batch_config_is_offered_its_one_length():
    """vLLM 0.32.0 documents num_speculative_tokens_per_batch_size as tested with EAGLE, EAGLE-3
    and DFlash only (issue 37): an ngram deployment is never told to ship with it. It ships as
    configured, its num_speculative_tokens (the length its speedup was measured at), and the line
    names the ranges section 13 finds as that option; where they turn speculation off, their
    speedup on the same steps too."""
    ngram = {"method": "ngram", **CONTEXT}
    recs = {"cap": {"config_speedup": {"speedup": 1.62, "interval": [1.58, 1.66]},
                    "buckets": [{"batch_bucket": "65-128", "evidence": "no_baseline"}]},
            "slow": {"config_speedup": {"speedup": 1.136, "interval": [1.127, 1.144]}}}
    _, v = decide([BASE, spec("ship", 1.3, [1.27, 1.33], **ngram), spec("cap", 1.5, [1.4, 1.6], **ngram),
                   spec("same", 1.2, [1.1, 1.3], **ngram), spec("slow", 0.79, [0.77, 0.81], **ngram),
                   spec("eagle", 1.3, [1.27, 1.33], **CONTEXT)],
                  [speed("ship", "pass"), speed("cap", "pass"), speed("same", "pass"), speed("slow", "fail", 0.79),
                   speed("eagle", "pass")],
                  {"ship": [[1, 32, 4], [33, 64, 2], [65, 128, 1]], "cap": [[1, 32, 4], [33, 128, 0]],
                   "same": [[1, 128, 4]], "slow": [[1, 16, 4], [17, 128, 0]],
                   "eagle": [[1, 32, 4], [33, 64, 2], [65, 128, 1]]}, recs)
    assert (v["ship"]["action"], v["ship"]["config"]) == ("ship", None)
    assert v["ship"]["text"] == (
        "Ship ship as configured, `\"num_speculative_tokens\": 4`: 1.30× [1.27, 1.33] the throughput of base at the "
        "same batch sizes and contexts, on 90% of its tokens (600 requests). Its per-batch lengths (section "
        "Speculation length), `\"num_speculative_tokens_per_batch_size\": [[1, 32, 4], [33, 64, 2], [65, 128, 1]]`, "
        "use an option vLLM 0.32.0 documents as tested with EAGLE, EAGLE-3 and DFlash only; ship uses method ngram.")
    # a cap is not offered either: it ships as it ran, and the capped ranges' speedup is named with them
    assert (v["cap"]["action"], v["cap"]["config"], v["cap"]["config_speedup"]) == ("ship", None, 1.62)
    assert v["cap"]["text"] == (
        "Ship cap as configured, `\"num_speculative_tokens\": 4`: 1.5× [1.4, 1.6] the throughput of base at the "
        "same batch sizes and contexts, on 90% of its tokens (600 requests). Its per-batch lengths (section "
        "Speculation length), `\"num_speculative_tokens_per_batch_size\": [[1, 32, 4], [33, 128, 0]]` (1.62× [1.58, "
        "1.66] on the same steps), use an option vLLM 0.32.0 documents as tested with EAGLE, EAGLE-3 and DFlash "
        "only; cap uses method ngram.")
    # ranges that are its one length everywhere say nothing more
    assert v["same"]["text"] == ("Ship same as configured, `\"num_speculative_tokens\": 4`: 1.2× [1.1, 1.3] the "
                                 "throughput of base at the same batch sizes and contexts, on 90% of its tokens "
                                 "(600 requests).")
    # too slow: where it pays is said, and that turning it off elsewhere takes the undocumented option
    assert (v["slow"]["action"], v["slow"]["config"]) == ("dont_ship", None)
    assert v["slow"]["text"] == (
        "Don't ship slow: 0.79× [0.77, 0.81] the throughput of base at the same batch sizes and contexts, on 90% of "
        "its tokens (600 requests): slower than plain decoding. It pays at batch sizes up to 16, but turning "
        "speculation off where it does not takes `\"num_speculative_tokens_per_batch_size\": [[1, 16, 4], "
        "[17, 128, 0]]` (1.136× [1.127, 1.144] on the same steps), an option vLLM 0.32.0 documents as tested with "
        "EAGLE, EAGLE-3 and DFlash only; slow uses method ngram.")
    # EAGLE keeps the per-batch config
    assert v["eagle"]["config"] == [[1, 32, 4], [33, 64, 2], [65, 128, 1]]
    assert v["eagle"]["text"].startswith("Ship eagle with `\"num_speculative_tokens_per_batch_size\": [[1, 32, 4], ")
    # blocked by latency while its speed passes: what it would pay as configured
    stall = chk("max_stall_p99_ms", 890.0, 250.0, "fail", 355.0, "worse", interval=[820.0, 960.0])
    _, v = decide([BASE, spec("a", 1.19, [1.16, 1.23], **ngram)], [gate("a", "latency", stall), speed("a", "pass")],
                  {"a": [[1, 64, 4], [65, 128, 0]]})
    assert v["a"]["text"] == ("Don't ship a: max stall p99 890 ms [820, 960] > 250: worse. Otherwise it pays, 1.19× "
                              "[1.16, 1.23] the throughput of base at the same batch sizes and contexts, on 90% of its "
                              "tokens (600 requests), as configured (`\"num_speculative_tokens\": 4`).")


def test_the_data_cannot_tell():
    # 1.02 [0.91, 1.14]: on the log scale the half-width is (ln 1.14 − ln 0.91) / 2 = 0.112669
    # and the distance from 1 is ln 1.02 = 0.019803: (0.112669 / 0.019803)² = 32.37× the 600
    # requests (19,423.1, so ≈ 19,424) would narrow it to exclude 1, if the speedup stays
    why = "its 95% interval [0.91, 1.14] includes min_speedup (1): the data can't tell"
    doc, v = decide([BASE, spec("a", 1.02, [0.91, 1.14])], [speed("a", "unknown", 1.02, why)], {"a": [[1, 128, 4]]})
    a = v["a"]
    assert a["action"] == "inconclusive" and a["blocking"] == []
    assert a["settle"] == "about 32.4× its requests (≈ 19,424) would settle it, if the speedup stays"
    # ±0.115 supports one decimal: 1.0× [0.9, 1.1]
    assert a["text"] == ("Not enough data to decide a: 1.0× [0.9, 1.1] the throughput of base at the same batch "
                         "sizes, on 90% of its tokens (600 requests); the interval includes 1, so the data can't tell "
                         "whether it pays. About 32.4× its requests (≈ 19,424) would settle it, if the speedup stays.")
    # nothing blocks it, but only ship and cap pass `--check`: an inconclusive deployment fails it,
    # with the verdict's reason (its text after "Not enough data to decide a: ")
    assert a["blocking"] == [] and any_blocked(doc["verdict"])
    assert check_failures(doc["verdict"]) == [{"deployment_id": "a", "action": "inconclusive",
                                               "reason": a["text"].removeprefix("Not enough data to decide a: ")}]
    # the issue's 1.053 [0.92, 1.15]: ((ln 1.15 − ln 0.92) / 2 / ln 1.053)² = (0.111572 / 0.051643)²
    # = 4.667, × 600 = 2,800.5
    _, v = decide([BASE, spec("a", 1.053, [0.92, 1.15])], [speed("a", "unknown", 1.053, why)])
    assert v["a"]["settle"].startswith("about 4.7× its requests (≈ 2,801)")
    # 1.001 [0.9, 1.1]: (0.100335 / 0.0009995)² ≈ 10,077× the requests is no advice
    _, v = decide([BASE, spec("a", 1.001, [0.9, 1.1])], [speed("a", "unknown", 1.001, why)])
    assert v["a"]["settle"] == "more requests would settle it only if the speedup moved: it sits within 0.001 of 1"


def test_what_would_settle_it_names_the_short_side():
    # The interval is the speedup ×/÷ exp(t·√(V_D + V_B)); f times one side's requests divides its
    # variance by f. 1.02 [0.91, 1.14] excludes 1 once the variance falls to
    # V · (0.019803 / 0.112669)² = V · 0.030891. With V_D = 0.00001 and V_B = 0.00099 (V = 0.001)
    # that is 3.0891e-5: the deployment alone can't get there (V_B > it), the baseline alone can:
    # V_B / (3.0891e-5 − V_D) = 0.00099 / 2.0891e-5 = 47.39× base's 600 requests (28,433.2)
    why = "its 95% interval [0.91, 1.14] includes min_speedup (1): the data can't tell"
    short = {"rounds": {"variance": {"deployment": 0.00001, "baseline": 0.00099}}}
    _, v = decide([BASE, spec("a", 1.02, [0.91, 1.14], matched=short)], [speed("a", "unknown", 1.02, why)])
    assert v["a"]["settle"] == ("its baseline is the short side (99% of the interval's variance): about 47.4× base's "
                                "requests (≈ 28,434 requests) would settle it, if the speedup stays")
    # equal shares (0.0005 each): neither alone gets below 3.0891e-5; both: V / 3.0891e-5 = 32.4×
    even = {"rounds": {"variance": {"deployment": 0.0005, "baseline": 0.0005}}}
    _, v = decide([BASE, spec("a", 1.02, [0.91, 1.14], matched=even)], [speed("a", "unknown", 1.02, why)])
    assert v["a"]["settle"] == ("about 32.4× the requests of both a and base would settle it, if the speedup stays "
                                "(neither side alone can)")


def test_too_little_coverage_asks_for_a_baseline_where_it_ran():
    why = "it covers 4.0% of the deployment's committed tokens, below min_speedup_coverage (50%)"
    # where its uncovered steps ran (deployments[].uncovered_buckets): batch 40-64, below none of
    # base's loads, and 65-90, above them: 40 % + 56 % of its tokens
    uncovered = [{"batch_bucket": "33-64", "committed_share": 0.4, "reason": "no_baseline_loads",
                  "min_batch_size": 40, "max_batch_size": 64},
                 {"batch_bucket": "65-128", "committed_share": 0.56, "reason": "above_baseline_loads",
                  "min_batch_size": 65, "max_batch_size": 90}]
    _, v = decide([BASE, spec("a", 1.2, [1.1, 1.3], coverage=0.04, uncovered_buckets=uncovered)],
                  [speed("a", "unknown", 1.2, why)])
    assert v["a"]["action"] == "inconclusive"
    assert v["a"]["text"] == ("Not enough data to decide a: 1.2× [1.1, 1.3] the throughput of base at the same batch "
                              "sizes, on 4% of its tokens (600 requests); it covers only 4% of its tokens (50% "
                              "needed): the rest ran where base never did. Base measured at batch 40-64 and batch "
                              "65-90 (where 96% of its tokens ran), with enough steps and requests at each load, "
                              "would settle it.")
    assert v["a"]["settle"] == ("base measured at batch 40-64 and batch 65-90 (where 96% of its tokens ran), with "
                                "enough steps and requests at each load, would settle it")


def test_unknown_says_what_would_decide():
    _, v = decide([spec("lonely", None, baseline=None, speedup_note="no baseline: no none deployment with model m "
                                                                      "and target_quant bf16")],
                  [speed("lonely", "unknown", None, "no baseline")])
    assert v["lonely"]["action"] == "unknown" and v["lonely"]["basis"] == "rounds"
    assert v["lonely"]["text"] == (
        "No verdict for lonely: its speedup is unknown (no baseline: no none deployment with model m and target_quant "
        "bf16); a plain-decoding deployment (method none) of model m with target_quant bf16, or its baseline_id set, "
        "would decide it.")
    # logs of the speculative deployment only: the baseline's log would decide it
    logged = spec("a", None, steps=False)
    _, v = decide([dict(BASE, round_ms={"mean": None}), logged], [speed("a", "unknown", None, "x")],
                  intervals=[{"deployment_id": "a"}])
    assert v["a"]["basis"] == "logs" and v["a"]["action"] == "unknown"
    assert v["a"]["settle"] == ("the log of base would decide it: `specan import vllm-log BASELINE.log --deployment "
                                "base --out TRACES` (or sglang-log), then the report again")


def test_too_few_requests_are_named_beside_an_unknown_speedup():
    """Issue 37: a deployment without a speedup whose rounds come from fewer requests than
    [evidence] min_requests says so too; a single request is below every floor, even one set to 1."""
    note = "no baseline: no none deployment with model m and target_quant bf16"
    lonely = dict(spec("lonely", None, baseline=None, speedup_note=note, requests=1))
    _, v = decide([lonely], [speed("lonely", "unknown", None, "no baseline")])
    assert v["lonely"]["action"] == "unknown"
    assert v["lonely"]["text"] == (
        "No verdict for lonely: its speedup is unknown (no baseline: no none deployment with model m and target_quant "
        "bf16), and not enough data: 1 request, floor 10 ([evidence] min_requests); at least 10 of its requests and "
        "a plain-decoding deployment (method none) of model m with target_quant bf16, or its baseline_id set, would "
        "decide it.")
    assert v["lonely"]["settle"].startswith("at least 10 of its requests and a plain-decoding deployment")
    _, v = decide([dict(lonely, num_requests=5)], [speed("lonely", "unknown", None, "no baseline")])
    assert "and not enough data: 5 requests, floor 10 ([evidence] min_requests);" in v["lonely"]["text"]
    # at the floor nothing more is said
    _, v = decide([dict(lonely, num_requests=10)], [speed("lonely", "unknown", None, "no baseline")])
    assert "not enough data" not in v["lonely"]["text"]
    # min_requests = 1: one request is still no sample
    from analyzer.analysis.config import parse_config
    full = {"deployments": [lonely], "gates": [speed("lonely", "unknown", None, "no baseline")], "tuning": {}}
    (one,) = verdicts(full, speedup_evidence(full), parse_config({"evidence": {"min_requests": 1}}, source="t"))
    assert "and not enough data: 1 request, floor 2; at least 2 of its requests and " in one["text"]


def test_response_only_rests_on_the_tpot_speedup():
    # no steps: the speedup from request timings decides, matched at the concurrency each request decoded at
    d = spec("a", None, steps=False, tpot_speedup=1.25, tpot_speedup_interval=[1.18, 1.31],
             tpot_speedup_coverage=0.97, tpot_speedup_requests=600,
             matched={"tpot": {"speedup": 1.25, "interval": [1.18, 1.31], "coverage": 0.97,
                               "loads": [7.5, 8.4], "baseline_loads": [7.0, 9.0]}})
    _, v = decide([dict(BASE, round_ms={"mean": None}), d], [speed("a", "pass", 1.25)])
    assert (v["a"]["basis"], v["a"]["action"], v["a"]["speedup"], v["a"]["matched_on"]) == (
        "tpot", "ship", 1.25, ["load"])
    assert v["a"]["text"] == ("Ship a as configured (num_speculative_tokens 4): 1.25× [1.18, 1.31] the output-token "
                              "rate of base by request timings at the same concurrency, on 97% of its output "
                              "tokens (600 requests); no per-batch recommendation (it needs steps).")
    # the two sides never decoded at comparable concurrency (a at 7.5-8.4, base at 60.2-64): no speedup is formed,
    # and the verdict names both loads instead of comparing the pooled rates
    d = spec("a", None, steps=False, tpot_speedup=None, tpot_speedup_coverage=None, tpot_speedup_requests=600,
             matched={"tpot": {"speedup": None, "interval": None, "coverage": 0.0,
                               "loads": [7.5, 8.4], "baseline_loads": [60.2, 64.0]}})
    _, v = decide([dict(BASE, round_ms={"mean": None}), d], [speed("a", "unknown", None, "x")])
    assert (v["a"]["basis"], v["a"]["action"], v["a"]["speedup"]) == ("tpot", "inconclusive", None)
    assert v["a"]["text"] == ("Not enough data to decide a: not matched on load, it ran at concurrency 7.5-8.4 and "
                              "base at concurrency 60.2-64; base measured at concurrency 7.5-8.4, where a ran, would "
                              "settle it.")
    # the ranges meet (1.5-6 and 1.6-10) and still no request is matched: the line counts them per reason
    d = spec("a", None, steps=False, tpot_speedup=None, tpot_speedup_coverage=None, tpot_speedup_requests=12,
             matched={"tpot": {"speedup": None, "interval": None, "coverage": 0.0, "loads": [1.5, 6.0],
                               "baseline_loads": [1.6, 10.0],
                               "unmatched": {"below_baseline_loads": 1, "load_gap": 11}}})
    _, v = decide([dict(BASE, round_ms={"mean": None}), d], [speed("a", "unknown", None, "x")])
    assert (v["a"]["action"], v["a"]["speedup"]) == ("inconclusive", None)
    assert v["a"]["text"] == (
        "Not enough data to decide a: not matched on load, it ran at concurrency 1.5-6 and base at concurrency 1.6-10, "
        "which meet, but none of its 12 requests was matched: 11 between base's measured concurrency values too far "
        "apart ([evidence] max_load_gap), 1 below every concurrency base measured; base measured at concurrency "
        "1.5-6, where a ran, would settle it.")


# --------------------------------------------------------------------------- bootstrap intervals

def test_identical_requests_give_an_interval_of_one_point(tmp_path):
    """Every spec request: 2 rounds in their own 20 ms steps at batch 1, drafting 4 and
    accepting 2 (3 tokens each); every baseline request: 3 plain rounds in 10 ms steps.
    Any resample of such requests has accept length 1 + 2 = 3, and deleting any block of
    time leaves the speedup t0 · tokens / time = (10 ms/token) · 6 / 40 ms = 1.5, so both
    intervals are one point."""
    rounds, steps, requests = [], [], []
    for i in range(40):
        requests.append(request("spec", f"s{i}"))
        requests.append(request("base", f"b{i}"))
        for r in range(2):
            sid = 10 * i + r
            steps.append(step("spec", sid, 20.0))
            rounds.append(round_row("spec", f"s{i}", r, 4, 2, step_id=sid))
        for r in range(3):
            sid = 10 * i + r
            steps.append(step("base", sid, 10.0))
            rounds.append(round_row("base", f"b{i}", r, 0, 0, step_id=sid))
    root = tmp_path / "traces"
    write_traces(root, deployments=[deployment("spec"), deployment("base", method="none")],
                 requests=requests, steps=steps, rounds=rounds)
    with api.open_traces(root) as ws:
        (row,) = ws.con.execute("select * from headline_intervals where deployment_id = 'spec'").fetchall()
        names = [d[0] for d in ws.con.description]
        doc = api.report_document(ws)
    got = dict(zip(names, row))
    # the accept length's Poisson bootstrap: the default [intervals] replicates, every one of them used (no
    # resample is empty)
    assert got["replicates"] == got["accept_length_replicates"] == 16000
    assert (got["mean_accept_length_lo"], got["mean_accept_length_hi"]) == (3.0, 3.0)
    # the speedup's block jackknife: 80 spec steps and 120 base steps, fewer than the 256 blocks of time, so each
    # step is its own block. Deleting a spec step leaves 3 · 79 · 10 / (79 · 20) = 1.5; deleting a base step leaves
    # t0(1) = 10 ms. Each side's 80 and 120 blocks agree exactly: V_D = V_B = 0, the interval is exp(ln 1.5 ± 0)
    spec = next(d for d in doc["deployments"] if d["deployment_id"] == "spec")
    assert spec["speedup"] == pytest.approx(1.5, rel=1e-15)
    assert spec["speedup_interval"] == [pytest.approx(1.5, rel=1e-15), pytest.approx(1.5, rel=1e-15)]
    matched = spec["matched"]["rounds"]
    assert (matched["variance"], matched["blocks"]) == ({"deployment": 0.0, "baseline": 0.0},
                                                        {"deployment": 80, "baseline": 120})
    # with nothing left to resolve, the verdict decides on it: no "more requests would settle it"
    v = next(x for x in doc["verdict"] if x["deployment_id"] == "spec")
    assert v["speedup_interval"] == spec["speedup_interval"] and v["settle"] is None


# --------------------------------------------------------------------------- the sample's decisions

def test_the_sample_shows_the_range_of_decisions(sample_report):
    """With the default gates the sample ships two deployments, caps one (its stalls miss the
    target, as its baseline's do, by a ratio its interval can't tell), blocks one on speed alone,
    and states what a deployment and its baseline miss alike as a service-level finding."""
    doc = sample_report["doc"]
    v = {x["deployment_id"]: x for x in doc["verdict"]}
    assert {d: x["action"] for d, x in v.items()} == {
        "base-bf16": "baseline", "base-fp8": "baseline", "eagle-bf16": "cap", "eagle-dyn-bf16": "ship",
        "eagle-fp8": "dont_ship", "ngram-bf16": "ship"}
    assert {x["basis"] for x in v.values() if x["action"] != "baseline"} == {"rounds"}
    checks = {(g["deployment_id"], c["name"]): c for g in doc["gates"] for c in g["checks"]}
    # eagle-bf16: max stall p99 890 ms, 2.5× base-bf16's 355 ms. Its interval lies past 250 ms and
    # so does base-bf16's at the same load, but the ratio's interval reaches below 1 + 25 %: the
    # p99 of 591 requests can't tell speculation's share, so it is unknown, not blocking
    stall = checks[("eagle-bf16", "max_stall_p99_ms")]
    assert stall["status"] == "unknown" and stall["value"] / stall["baseline_value"] > 2.5
    assert stall["interval"][0] > 250 and stall["baseline_interval"][0] > 250
    assert stall["ratio_interval"][0] < 1.25 < stall["ratio_interval"][1]
    assert v["eagle-bf16"]["blocking"] == [] and "max_stall_p99_ms" in v["eagle-bf16"]["not_checked"]
    # ... and its config turns speculation off above 32, which pays more on the same steps than
    # what ran
    cap = v["eagle-bf16"]
    assert cap["config"][-1][2] == 0 and cap["config_speedup_interval"][0] > cap["speedup_interval"][1] > 1
    assert "with that config, on the same steps (as it ran: " in cap["text"]
    # eagle-fp8: the speedup's interval lies below 1, and the speed alone blocks: its TPOT p95,
    # 30 % above base-fp8's at the same load, lies inside its 60 ms target
    assert [b["check"] for b in v["eagle-fp8"]["blocking"]] == ["speedup"]
    assert v["eagle-fp8"]["speedup_interval"][1] < 1
    assert v["eagle-fp8"]["text"].startswith("Don't ship eagle-fp8: 0.79× [0.76, 0.81] the throughput of base-fp8")
    tpot = checks[("eagle-fp8", "tpot_p95_ms")]
    assert tpot["status"] == "pass" and tpot["ratio"] > 1.25 and tpot["interval"][1] <= 60
    # the shipped ones clear 1 with their lower bound, on most of their tokens, and carry the one config
    recommended = {r["deployment_id"]: r["num_speculative_tokens_per_batch_size"]
                   for r in doc["tuning"]["recommendations"]}
    for dep in ("eagle-dyn-bf16", "ngram-bf16"):
        assert v[dep]["speedup_interval"][0] > 1 and v[dep]["coverage"] > 0.5 and not v[dep]["blocking"]
    assert v["eagle-dyn-bf16"]["config"] == recommended["eagle-dyn-bf16"]
    # ngram is offered its one length: vLLM documents the per-batch option for EAGLE, EAGLE-3 and DFlash
    # only, which the line says of the ranges section 13 finds (and section 13 itself says)
    assert v["ngram-bf16"]["config"] is None
    assert v["ngram-bf16"]["text"].startswith(
        "Ship ngram-bf16 as configured, `\"num_speculative_tokens\": 4`: 1.23× [1.20, 1.27] the throughput of "
        "base-bf16 at the same batch sizes and contexts, on 92% of its tokens (591 requests). Its per-batch lengths "
        "(section Speculation length), `\"num_speculative_tokens_per_batch_size\": [[1, 32, 4], [33, 64, 2], "
        "[65, 128, 1]]`, use an option vLLM 0.32.0 documents as tested with EAGLE, EAGLE-3 and DFlash only; "
        "ngram-bf16 uses method ngram. Undecided: ")
    assert ("### ngram-bf16\n\nvLLM config: `\"num_speculative_tokens\": 4`, as configured. The lengths per batch "
            "size below, `\"num_speculative_tokens_per_batch_size\": [[1, 32, 4], [33, 64, 2], [65, 128, 1]]`, use an "
            "option vLLM 0.32.0 documents as tested with EAGLE, EAGLE-3 and DFlash only; ngram-bf16 uses method "
            "ngram.\n") in sample_report["md"]
    for dep in ("eagle-bf16", "eagle-fp8", "eagle-dyn-bf16", "ngram-bf16"):
        assert v[dep]["matched_on"] == ["load", "context"] and v[dep]["not_matched"] == []
    # ngram-bf16's stall misses 250 ms and base-bf16's at the same load too, within 25 %: one
    # finding, no block; base-bf16's TTFT miss, which no deployment shares by its interval, is
    # its own finding
    assert [s["check"] for s in v["ngram-bf16"]["shared"]] == ["max_stall_p99_ms"]
    stall = checks[("ngram-bf16", "max_stall_p99_ms")]
    assert stall["interval"][0] > 250 and stall["ratio_interval"][1] <= 1.25
    assert shared_findings(doc) == [
        "max stall p99 misses 250 ms with or without speculation: 364 vs 356 ms (ngram-bf16 vs base-bf16)",
        "base-bf16 (plain decoding) misses TTFT p99 3,597 ms > 2,000"]


def test_the_sample_peak_hour_is_the_same_burst_everywhere(sample_report):
    # every deployment serves the same requests: the busiest clock hour is the one with the
    # burst of 2026-11-27, whose 119 requests' tokens are all committed within it
    hours = {d["capacity"]["peak_hour"].isoformat() for d in sample_report["doc"]["deployments"]}
    assert hours == {"2026-11-27T13:00:00"}         # the hour in UTC
    assert "Every deployment shows the same peak-hour rate: they served the same requests" in sample_report["md"]


# --------------------------------------------------------------------------- what engines emit

FIXTURES = Path(__file__).parent / "fixtures"


def import_pair(tmp_path, source: str, fixture: str):
    """A speculative deployment imported from ``fixture`` and a plain baseline from vLLM
    responses, the same model: the pair a user of response imports has."""
    from click.testing import CliRunner

    from analyzer.cli import main

    traces = tmp_path / "traces"
    for args in ([source, str(FIXTURES / fixture), "--deployment", "spec", "--method", "eagle3"],
                 ["vllm-responses", str(FIXTURES / "vllm_responses_plain.jsonl"), "--deployment", "base",
                  "--method", "none"]):
        result = CliRunner().invoke(main, ["import", *args, "--model", "m", "--out", str(traces)])
        assert result.exit_code == 0, result.output
    return traces


def report_json(traces, *extra):
    from click.testing import CliRunner

    from analyzer.cli import main

    result = CliRunner().invoke(main, ["report", str(traces), "--format", "json", *map(str, extra)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def plain_responses(path: Path, prompt_tokens: int) -> Path:
    """Twelve plain vLLM responses (no speculative_decoding metrics) 10 s apart, each alone at
    concurrency 1: 11 output tokens, 10 after the first in 180, 200 or 220 ms in turn, so
    t0(1) = 4 · (180 + 200 + 220) / (12 · 10) = 20 ms per token; ``prompt_tokens`` each."""
    lines = [{"id": f"chatcmpl-base-{i}", "object": "chat.completion", "created": 1795867200 + 10 * i, "model": "m",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "length"}],
              "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + 11, "completion_tokens": 11},
              "metrics": {"time_to_first_token_ms": 30.0, "generation_time_ms": (180.0, 200.0, 220.0)[i % 3],
                          "queue_time_ms": 0.0}} for i in range(12)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


# Per fixture, by hand from its requests (decode = first token to finish, ms; tokens = output − 1):
#   vllm_responses.jsonl: 4 timed of 6 (10 in 300, 5 in 60, 9 in 50, 8 in 100; seconds apart: concurrency 1 each);
#     all 6 have 10 + 5 + 9 + 8 + 12 + 6 = 50 tokens. At t0(1) = 20: 32 · 20 / 510
#   chat_stream.sse: 1 timed, 9 tokens in 90 ms: 9 · 20 / 90 = 2
#   aiperf: 5 timed of 6. Decode windows (s after 05:00:00): A [7.7888, 7.8304] alone, 1; B [8.08, 10.4005]
#     holds C [9.1, 9.5] and D [10.05, 10.3]: B (2.3205 + 0.4 + 0.25) / 2.3205 = 1.28 → 1.3, C and D 2; F [12.06,
#     12.4] alone, 1. Only A (50 tokens in 41.638 ms) and F (29 in 340) ran where base did (concurrency 1; 1.3 lies
#     above base's cell, which held 1.0 only): 79 · 20 / 381.638; all 6: 566 + 8 (E, no first token) = 574 tokens
#   llamacpp: 2 timed, alone: 199 in 11,082.606 and 664 in 20,629.211 ms: 863 · 20 / 31,711.817
RESPONSE_CASES = {
    "vllm_responses.jsonl": {"timed": 4, "speedup": 32 * 20 / 510, "coverage": 32 / 50, "loads": [1.0, 1.0],
                             "matched": 4},
    "streams/chat_stream.sse": {"timed": 1, "speedup": 2.0, "coverage": 1.0, "loads": [1.0, 1.0], "matched": 1},
    "aiperf/profile_export.jsonl": {"timed": 5, "speedup": 79 * 20 / 381.638, "coverage": 79 / 574,
                                    "loads": [1.0, 2.0], "matched": 2},
    "llamacpp/responses.jsonl": {"timed": 2, "speedup": 863 * 20 / 31711.817, "coverage": 1.0, "loads": [1.0, 1.0],
                                 "matched": 2},
}


@pytest.mark.parametrize("source, fixture", [
    ("vllm-responses", "vllm_responses.jsonl"),
    ("vllm-responses", "streams/chat_stream.sse"),
    ("aiperf-records", "aiperf/profile_export.jsonl"),
    ("llamacpp-log", "llamacpp/responses.jsonl"),
])
def test_response_imports_are_decided_on_their_timings(tmp_path, source, fixture):
    from click.testing import CliRunner

    from analyzer.analysis.config import parse_config
    from analyzer.cli import main

    hand = RESPONSE_CASES[fixture]
    # the plain fixture's 2 responses, each alone (concurrency 1): base's cell 1 holds 2 requests, below the 10 a
    # point of its curve needs ([evidence] min_baseline_requests), so no speedup is matched, and nothing decides.
    # A cell below the floors is no load the baseline measured (baseline_loads null), so the speedup is unknown
    # for the floors' reason, and the verdict must not say the two were never at comparable loads
    doc = report_json(import_pair(tmp_path, source, fixture))
    spec = next(d for d in doc["deployments"] if d["deployment_id"] == "spec")
    v = next(x for x in doc["verdict"] if x["deployment_id"] == "spec")
    assert (spec["tpot_speedup"], spec["tpot_speedup_requests"]) == (None, hand["timed"])
    assert (spec["matched"]["tpot"]["matched_units"], spec["matched"]["tpot"]["loads"],
            spec["matched"]["tpot"]["baseline_loads"]) == (0, hand["loads"], None)
    assert (v["basis"], v["action"], v["blocking"]) == ("tpot", "unknown", [])
    assert "not matched on load" not in v["text"] and "min_baseline_requests" in v["text"]

    # twelve plain responses at concurrency 1 (t0(1) = 20 ms per token), prompts as long as spec's median (so
    # the two are matched on what timings can match): spec's requests at concurrency 1 are matched
    traces = tmp_path / "with-baseline"
    baseline = plain_responses(tmp_path / "plain12.jsonl", round(spec["prompt_tokens_median"]))
    for args in ([source, str(FIXTURES / fixture), "--deployment", "spec", "--method", "eagle3"],
                 ["vllm-responses", str(baseline), "--deployment", "base", "--method", "none"]):
        result = CliRunner().invoke(main, ["import", *args, "--model", "m", "--out", str(traces)])
        assert result.exit_code == 0, result.output
    lifted = parse_config({"evidence": {"min_requests": 1}}, source="test")
    with api.open_traces(traces) as ws:
        doc = api.report_document(ws)
        lifted_doc = api.report_document(ws, config=lifted)
    spec = next(d for d in doc["deployments"] if d["deployment_id"] == "spec")
    v = next(x for x in doc["verdict"] if x["deployment_id"] == "spec")
    assert spec["tpot_speedup"] == pytest.approx(hand["speedup"], rel=1e-12)
    assert spec["tpot_speedup_coverage"] == pytest.approx(hand["coverage"], rel=1e-12)
    matched = spec["matched"]["tpot"]
    assert (matched["units"], matched["matched_units"], matched["loads"], matched["baseline_loads"]) == (
        hand["timed"], hand["matched"], hand["loads"], [1.0, 1.0])
    if hand["matched"] >= 2:
        # the block jackknife's interval holds the hand value
        lo, hi = spec["tpot_speedup_interval"]
        assert lo < hand["speedup"] < hi
    else:
        # one request is one block of time: no spread to measure, no interval
        assert spec["tpot_speedup_interval"] is None
    assert (v["basis"], v["speedup"], v["num_requests"]) == ("tpot", spec["tpot_speedup"], hand["timed"])
    # a handful of timed requests: never a decision on the speedup (latency that speculation made worse blocks
    # only with enough requests too, so nothing here blocks either)
    assert v["action"] == "inconclusive" and v["blocking"] == []
    assert f"it rests on {hand['timed']:,} request" in v["text"] and "(10 needed)" in v["text"]
    assert v["settle"] == f"at least 10 of its requests (it has {hand['timed']}) would settle it"
    # with the request floor lifted the same traces still do not decide: a jackknife over 2 to 5 requests of
    # unlike rates (Welch df of 1 to 3) gives an interval that includes 1, and one request gives none
    v = next(x for x in lifted_doc["verdict"] if x["deployment_id"] == "spec")
    assert (v["action"], v["basis"]) == ("inconclusive", "tpot")
    assert (("the interval includes 1, so the data can't tell whether it pays" if hand["matched"] >= 2 else
             "there is no interval to tell noise from a gain") in v["text"])


@pytest.mark.parametrize("source, fixture, requests", [("sglang-responses", "sglang_responses.jsonl", 3),
                                                       ("trtllm-responses", "trtllm/responses.jsonl", 4)])
def test_responses_without_timings_say_what_would_decide(tmp_path, source, fixture, requests):
    v = next(x for x in report_json(import_pair(tmp_path, source, fixture))["verdict"] if x["deployment_id"] == "spec")
    assert (v["action"], v["basis"]) == ("unknown", None)
    # its 3 or 4 responses are fewer than [evidence] min_requests, which the line says too (issue 37)
    assert v["settle"] == ("at least 10 of its requests and request timings (first_token_time, finish_time) of both "
                           "spec and base would decide it")
    assert v["text"] == ("No verdict for spec: its speedup is unknown (no steps, and no request timings or log "
                         f"intervals on both sides), and not enough data: {requests} requests, floor 10 ([evidence] "
                         f"min_requests); {v['settle']}.")


def test_loads_that_meet_but_match_no_step_are_counted_per_reason(tmp_path):
    """The two sides' batch ranges overlap, yet no step of spec is matched: base ran at batch 2
    and 4 only, points 4 > 2 · 1.25 + 1 = 3.5 apart, so spec's two steps at batch 3 lie between
    loads too far apart (load_gap), and its step at batch 1 lies below base's least load, 2
    (below_baseline_loads). The verdict must not say the two never met: it counts the steps per
    reason, 2 + 1 = all 3 of spec's decode steps."""
    from tracebuilder import no_floors_config

    steps = [step("base", 1, 10.0, batch_size=2), step("base", 2, 20.0, batch_size=4),
             step("spec", 1, 12.0, batch_size=3), step("spec", 2, 12.0, batch_size=3),
             step("spec", 3, 9.0, batch_size=1)]
    rounds = [round_row("base", "q1", 0, 0, 0, step_id=1), round_row("base", "q2", 0, 0, 0, step_id=1),
              round_row("base", "q1", 1, 0, 0, step_id=2, stop_reason="eos"),
              round_row("base", "q2", 1, 0, 0, step_id=2, stop_reason="eos"),
              round_row("spec", "r1", 0, 4, 3, step_id=1), round_row("spec", "r1", 1, 4, 2, step_id=2),
              round_row("spec", "r1", 2, 4, 1, step_id=3, stop_reason="eos")]
    traces = write_traces(tmp_path / "t", deployments=[deployment("spec", gamma=4), deployment("base", method="none")],
                          requests=[request("spec", "r1"), request("base", "q1"), request("base", "q2")],
                          steps=steps, rounds=rounds)
    doc = report_json(traces, "--config", no_floors_config(tmp_path))
    matched = next(d for d in doc["deployments"] if d["deployment_id"] == "spec")["matched"]["rounds"]
    assert (matched["speedup"], matched["matched_units"], matched["units"]) == (None, 0, 3)
    assert (matched["loads"], matched["baseline_loads"]) == ([1, 3], [2, 4])
    assert matched["unmatched"] == {"load_gap": 2, "below_baseline_loads": 1}
    v = next(x for x in doc["verdict"] if x["deployment_id"] == "spec")
    assert (v["action"], v["speedup"]) == ("inconclusive", None)
    assert v["text"].startswith(
        "Not enough data to decide spec: not matched on load, it ran at batch 1-3 and base at batch 2-4, which meet, "
        "but none of its 3 steps was matched: 2 between base's measured batch values too far apart ([evidence] "
        "max_load_gap), 1 below every batch base measured; "), v["text"]
