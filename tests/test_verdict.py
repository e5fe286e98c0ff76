"""The verdict lines that open the report, the digits an interval supports, and the
bootstrap intervals of the headline numbers."""

from __future__ import annotations

import pytest

from analyzer import api
from analyzer.analysis.precision import supported_decimals, with_interval
from analyzer.analysis.verdict import failed_check_text, shared_gate_failures, verdicts
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

def gate(dep, name, status, *checks):
    return {"deployment_id": dep, "gate": name, "status": status, "reason": None,
            "checks": [{"name": n, "value": v, "threshold": t, "status": s, "reason": None}
                       for n, v, t, s in checks]}


def doc_with(deployments, gates, ranges):
    return {"deployments": deployments, "gates": gates,
            "tuning": {"recommendations": [{"deployment_id": dep, "num_speculative_tokens_per_batch_size": r}
                                           for dep, r in ranges.items()]}}


def spec(dep, speedup, interval=None, baseline="base"):
    return {"deployment_id": dep, "method": "eagle", "num_speculative_tokens": 4, "baseline_id": baseline,
            "speedup": speedup, "speedup_interval": interval}


BASE = {"deployment_id": "base", "method": "none", "num_speculative_tokens": 0, "baseline_id": None,
        "speedup": None}


def test_a_failed_gate_is_named_with_value_and_threshold():
    doc = doc_with([BASE, spec("a", 1.19, [1.16, 1.23])],
                   [gate("a", "latency", "fail", ("ttft_p99_ms", 4351.96, 2000.0, "fail"),
                         ("tpot_p95_ms", 30.0, 60.0, "pass")),
                    gate("a", "capacity", "pass", ("speedup", 1.19, 1.0, "pass")),
                    gate("base", "latency", "pass", ("ttft_p99_ms", 1500.0, 2000.0, "pass"))],
                   {"a": [[1, 64, 4], [65, 128, 0]]})
    base_line, a_line = verdicts(doc)
    assert a_line == {"deployment_id": "a", "action": "dont_ship",
                      "text": "Don't ship a: the latency gate fails (TTFT p99 4,352 ms > 2,000). Otherwise it pays "
                              "(1.19× [1.16, 1.23] the throughput of base), with "
                              "`\"num_speculative_tokens_per_batch_size\": [[1, 64, 4], [65, 128, 0]]`."}
    assert base_line == {"deployment_id": "base", "action": "baseline",
                         "text": "base is plain decoding, the baseline of the others."}
    assert failed_check_text({"name": "speedup", "value": 0.7864, "threshold": 1.0}) == "speedup 0.786 < 1"
    assert failed_check_text({"name": "match_rate", "value": 0.98, "threshold": 1.0}) == "match rate 98.0% < 100.0%"


def test_cap_ship_slower_and_unknown():
    doc = doc_with([BASE, spec("cap", 1.5), spec("ship", 1.3), spec("slow", 0.9), spec("unk", None),
                    spec("asis", 1.2)],
                   [gate("ship", "correctness", "unknown", ("match_rate", None, 1.0, "unknown"))],
                   {"cap": [[1, 32, 4], [33, 128, 0]], "ship": [[1, 8, 5], [9, 128, 3]], "slow": [[1, 1, 4]],
                    "unk": [], "asis": []})
    lines = {v["deployment_id"]: (v["action"], v["text"]) for v in verdicts(doc)}
    assert lines["cap"] == ("cap", "Ship cap with speculation capped at batch 32: "
                                   "`\"num_speculative_tokens_per_batch_size\": [[1, 32, 4], [33, 128, 0]]` "
                                   "(1.50× the throughput of base).")
    assert lines["ship"] == ("ship", "Ship ship with `\"num_speculative_tokens_per_batch_size\": [[1, 8, 5], "
                                     "[9, 128, 3]]` (1.30× the throughput of base). Not checked: the correctness "
                                     "gate (data missing).")
    assert lines["slow"] == ("dont_ship", "Don't ship slow: 0.90× the throughput of base, no faster than plain "
                                          "decoding.")
    assert lines["unk"] == ("unknown", "No verdict for unk: its speedup is unknown (see the notes).")
    assert lines["asis"] == ("ship", "Ship asis as configured (num_speculative_tokens 4): 1.20× the throughput of "
                                     "base; no per-batch recommendation (see section 13).")


def test_a_gate_the_baseline_fails_too_is_said_and_shared_failures_are_found():
    gates = [gate("a", "latency", "fail", ("max_stall_p99_ms", 266.4, 250.0, "fail")),
             gate("base", "latency", "fail", ("max_stall_p99_ms", 253.5, 250.0, "fail")),
             gate("base", "capacity", "pass", ("preemptions_per_request", 0.0, 0.05, "pass")),
             gate("a", "capacity", "fail", ("speedup", 0.79, 1.0, "fail"))]
    doc = doc_with([BASE, spec("a", 0.79)], gates, {"a": [[1, 16, 4], [17, 128, 0]]})
    base_line, a_line = verdicts(doc)
    assert a_line["text"] == ("Don't ship a: the latency gate fails (max stall p99 266 ms > 250); the capacity "
                              "gate fails (speedup 0.790 < 1). Its baseline base fails the latency gate too: "
                              "compare with the baseline's values before blaming speculation.")
    assert base_line["text"] == ("base is plain decoding, the baseline of the others, and the latency gate fails "
                                 "(max stall p99 254 ms > 250).")
    assert shared_gate_failures(doc) == ["latency"]


# --------------------------------------------------------------------------- bootstrap intervals

def test_identical_requests_give_an_interval_of_one_point(tmp_path):
    """Every spec request: 2 rounds in their own 20 ms steps at batch 1, drafting 4 and
    accepting 2 (3 tokens each); every baseline request: 3 plain rounds in 10 ms steps.
    Any resample of such requests has accept length 1 + 2 = 3 and speedup
    t0 · tokens / time = (10 ms/token) · 6 / 40 ms = 1.5, so both intervals are one point."""
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
    ws = api.open_traces(root)
    try:
        (row,) = ws.con.execute("select * from headline_intervals where deployment_id = 'spec'").fetchall()
        names = [d[0] for d in ws.con.description]
    finally:
        ws.close()
    got = dict(zip(names, row))
    # the default [intervals] replicates, every one of them used (no resample is empty)
    assert got["replicates"] == got["accept_length_replicates"] == got["speedup_replicates"] == 16000
    assert (got["mean_accept_length_lo"], got["mean_accept_length_hi"]) == (3.0, 3.0)
    assert got["speedup_lo"] == pytest.approx(1.5, rel=1e-15)
    assert got["speedup_hi"] == pytest.approx(1.5, rel=1e-15)
