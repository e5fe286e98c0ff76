"""The speedup from engine logs alone (basis: logs; views log_speedup and log_speedup_by_batch;
docs/metrics.md "Speedup from engine logs"), through the CLI as a user runs it: `specan import
vllm-log|sglang-log` for both deployments, then `specan report`. Each of D's usable log intervals
is matched at its own running-request count with B's seconds per token there, interpolated
between the counts B logged at least [evidence] min_log_intervals times; the interval is the
block jackknife over both sides' intervals in time order.

The fixture lines are real (tests/fixtures/*/SOURCES.md); the interpolation between counts is
shown on intervals written by hand (test_a_count_between_two_the_baseline_logged_is_interpolated).
Every number is worked out by hand."""

from __future__ import annotations

import json
import math

import pytest

from analyzer.analysis.precision import with_interval

from imported import run
from test_import_sglang_log import LOGS as SGLANG
from test_vllm_log_layouts import LOGS as VLLM
from tracebuilder import at, deployment, write_table


def import_log(out, source: str, files, deployment: str, *extra) -> None:
    result = run("import", source, *files, "--deployment", deployment, "--model", "m", "--out", out, *extra)
    assert result.exit_code == 0, result.output


def report(tmp_path, traces, config: str | None = None, fmt: str = "json"):
    args = ["report", traces, "--format", fmt]
    if config is not None:
        path = tmp_path / "specan.toml"
        path.write_text(config)
        args += ["--config", path]
    result = run(*args)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout) if fmt == "json" else result.stdout


def deployment_of(doc: dict, dep: str) -> dict:
    return next(d for d in doc["deployments"] if d["deployment_id"] == dep)


def curve(doc: dict, *keys: str) -> list[tuple]:
    return [tuple(r[k] for k in keys) for r in doc["log_load_curve"]]


# A fixture log holds a few lines per running-request count: the floor of 10 lines a count needs
# before it is a point of the baseline's curve is lowered to 1 where a test reads the numbers.
FLOOR_1 = "[evidence]\nmin_log_intervals = 1\n"


@pytest.fixture
def vllm_pair(tmp_path):
    # D: club-3090#105 (v1_newest.log), MTP, two ticks at 1 running: 16:25:09 (the first: no start) and
    # 16:25:19, 72.0 tokens/s over 10 s. B: vllm#12314, plain decoding: 1 running at 41.7, 41.5, 41.8,
    # 41.8 and 41.7 tokens/s over 5 s each after its first line, and 2 running (82.5, 81.2, 81.0, 81.3) in the
    # other excerpt.
    traces = tmp_path / "traces"
    import_log(traces, "vllm-log", [VLLM / "v1_newest.log"], "mtp", "--year", "2025")
    import_log(traces, "vllm-log", [VLLM / "baseline_v0_pending.log", VLLM / "baseline_v0_pending_two_running.log"],
               "plain", "--year", "2025")
    return traces


def test_vllm_logs_speedup_by_hand(tmp_path, vllm_pair):
    doc = report(tmp_path, vllm_pair, FLOOR_1)
    d = deployment_of(doc, "mtp")
    # D's one interval ran at 1 running: B logged 1 five times, (41.7 + 41.5 + 41.8 + 41.8 + 41.7) · 5 = 1042.5
    # tokens in 25 s, 25 / 1042.5 s per token. D's 72.0 · 10 = 720 tokens would take B 720 · 25 / 1042.5 =
    # 17.266 s: 17.266 / 10 = 72.0 / 41.7
    assert d["log_speedup"] == pytest.approx(72.0 / 41.7, rel=1e-12)
    assert d["log_speedup_coverage"] == 1.0          # D logged 1 running only, and B did too
    # D's one interval is one block of time: the jackknife has no spread of D's to measure, so no interval
    assert d["log_speedup_interval"] is None
    assert (d["matched"]["logs"]["blocks"]["deployment"], d["matched"]["logs"]["variance"]["deployment"]) == (1, None)
    assert d["log_speedup_evidence"] == {
        # D's interval matched; B's intervals at the counts it logged at least once (the floor): 5 at 1, 4 at 2
        "intervals": 1, "baseline_intervals": 9, "min_intervals": 1, "usable_intervals": 1,
        # B: 5 + 4 usable lines (each file's first has no start)
        "baseline_usable_intervals": 9,
        "left_out": {"without_start": 1, "idle": 0, "without_throughput": 0, "without_running": 0},
        "loads": [1.0, 1.0], "baseline_loads": [1.0, 2.0], "note": None}
    assert curve(doc, "deployment_id", "baseline_id", "batch_bucket", "num_intervals", "seconds", "generated_tokens",
                 "generation_tokens_per_s", "baseline_intervals", "baseline_seconds", "counted") == [
        ("mtp", "plain", "1", 1, 10.0, 720.0, 72.0, 5, 25.0, True)]
    (row,) = doc["log_load_curve"]
    assert row["baseline_generation_tokens_per_s"] == pytest.approx(41.7, rel=1e-12)
    assert row["baseline_seconds_for_tokens"] == pytest.approx(720 / 41.7, rel=1e-12)
    assert row["speedup"] == pytest.approx(72.0 / 41.7, rel=1e-12)
    assert deployment_of(doc, "plain")["log_speedup"] is None       # a baseline has none
    assert "mtp: 1 of 2 log intervals left out of the logs speedup: 1 without a start" in doc["notes"]


def test_a_count_resting_on_few_lines_does_not_decide(tmp_path, vllm_pair):
    # the default floor: B's count is a point of its curve with 10 usable lines there; B logged 1 running five
    # times and 2 running four times, so it has no point at all
    doc = report(tmp_path, vllm_pair)
    d = deployment_of(doc, "mtp")
    assert d["log_speedup"] is None and d["log_speedup_interval"] is None
    assert d["log_speedup_coverage"] == 0.0
    note = "not enough data: plain logged no running-request count 10 times (the most: 5; [evidence] min_log_intervals)"
    assert d["log_speedup_evidence"]["note"] == note and f"mtp: {note}" in doc["notes"]
    assert (d["log_speedup_evidence"]["intervals"], d["log_speedup_evidence"]["baseline_intervals"]) == (0, 0)
    # the curve still shows the bucket and B's throughput there, 1042.5 / 25 = 41.7, but no speedup
    assert curve(doc, "batch_bucket", "num_intervals", "baseline_intervals", "baseline_seconds_for_tokens", "speedup",
                 "counted") == [("1", 1, 5, None, None, False)]
    assert doc["log_load_curve"][0]["baseline_generation_tokens_per_s"] == pytest.approx(41.7, rel=1e-12)
    # nothing decides: no speedup at all is "unknown" (docs/metrics.md, verdict rule 3), with the floor's
    # reason; both logged 1 running, so the verdict must not say they were never at comparable loads
    v = next(x for x in doc["verdict"] if x["deployment_id"] == "mtp")
    assert (v["basis"], v["action"]) == ("logs", "unknown")
    assert "not matched on load" not in v["text"] and "min_log_intervals" in v["text"]


def test_each_interval_is_matched_at_its_own_running_count_and_the_floor_cuts_coverage(tmp_path):
    # D: vllm#43295's MTP deployment. Usable intervals (10 s each): 10:25:33 at 9 running, 972.4 tokens/s;
    # 10:27:13 at 9, 929.6; 10:30:43 at 8, 1004.4. B: tt-inference-server#3359, plain decoding: 07:51:49 at 8
    # running, 71.6; 07:51:59 at 7, 132.0; 08:01:49 at 9, 7.2; 08:01:59 at 10, 5.7; 08:02:09 at 10, 7.2.
    traces = tmp_path / "traces"
    import_log(traces, "vllm-log", [VLLM / f"mtp_newest_{t}.log" for t in ("1025", "1027", "1030")], "mtp",
               "--year", "2026")
    import_log(traces, "vllm-log", [VLLM / "baseline_shipper_times_0751.log", VLLM / "baseline_shipper_times_0801.log"],
               "plain", "--year", "2026")
    # floor 1: every count B logged is a point. D's interval at 8 is matched with B's line at 8 alone: 10044
    # tokens at 71.6 tokens/s (not the 5-8 bucket's pooled (71.6 + 132.0) / 2 = 101.8, whose 7 running is another
    # load); D's two at 9, 19020 tokens, with B's line at 9: 7.2 tokens/s.
    doc = report(tmp_path, traces, FLOOR_1)
    d = deployment_of(doc, "mtp")
    both = (10044 / 71.6 + 19020 / 7.2) / 30
    assert d["log_speedup"] == pytest.approx(both, rel=1e-12) and d["log_speedup_coverage"] == 1.0
    assert (d["log_speedup_evidence"]["intervals"], d["log_speedup_evidence"]["baseline_intervals"],
            d["log_speedup_evidence"]["loads"], d["log_speedup_evidence"]["baseline_loads"]) == (
        3, 5, [8.0, 9.0], [7.0, 10.0])
    # each of B's counts 8 and 9 rests on one line: deleting it leaves the count's own value in place (nothing
    # else measured it), so B's side has no spread to measure and there is no interval
    assert d["log_speedup_interval"] is None
    # the curve: per bucket, B's pooled throughput there, and D's tokens at B's rate at D's own counts
    assert curve(doc, "batch_bucket", "num_intervals", "generated_tokens", "baseline_intervals", "counted") == [
        ("5-8", 1, 10044.0, 2, True), ("9-16", 2, 19020.0, 3, True)]
    five, nine = doc["log_load_curve"]
    assert (five["baseline_generation_tokens_per_s"], nine["baseline_generation_tokens_per_s"]) == (
        pytest.approx(101.8, rel=1e-12), pytest.approx(6.7, rel=1e-12))   # (7.2 + 5.7 + 7.2) / 3
    assert five["baseline_seconds_for_tokens"] == pytest.approx(10044 / 71.6, rel=1e-12)
    assert five["speedup"] == pytest.approx(1004.4 / 71.6, rel=1e-12)
    assert nine["baseline_seconds_for_tokens"] == pytest.approx(19020 / 7.2, rel=1e-12)
    assert nine["speedup"] == pytest.approx(951.0 / 7.2, rel=1e-12)
    # floor 2: B logged only 10 running twice, so 10 is its one point; D's 8 and 9 lie below it (and below the
    # least load of its cell, 10): nothing is matched, whatever B's single lines at 8 and 9 said
    d = deployment_of(report(tmp_path, traces, "[evidence]\nmin_log_intervals = 2\n"), "mtp")
    assert (d["log_speedup"], d["log_speedup_coverage"], d["log_speedup_interval"]) == (None, 0.0, None)
    assert (d["log_speedup_evidence"]["intervals"], d["log_speedup_evidence"]["baseline_intervals"],
            d["log_speedup_evidence"]["min_intervals"]) == (0, 2, 2)
    # B did log 8 and 9, once each: below the floor, which the note says (not "never at comparable loads")
    assert d["log_speedup_evidence"]["note"] == (
        "not enough data: plain logged the running-request counts this deployment ran at (8-9) fewer than 2 times "
        "(the most: 1; [evidence] min_log_intervals)")


def test_the_same_deployment_with_and_without_mtp_never_shared_a_load(tmp_path):
    # vllm#43295: the same model, config and benchmark, with and without MTP. With MTP it ran 8-9 requests
    # at a time, without 18-21 (cells 17-18, 19-20 and 21-22, points 18, 19.5 and 21 as logged): the least of
    # them lies far above 9, so no interval of D is matched and no speedup at equal load can be formed.
    traces = tmp_path / "traces"
    import_log(traces, "vllm-log", [VLLM / f"mtp_newest_{t}.log" for t in ("1025", "1027", "1030")], "mtp",
               "--year", "2026")
    import_log(traces, "vllm-log", [VLLM / "baseline_newest_no_mtp.log"], "no-mtp", "--year", "2026")
    doc = report(tmp_path, traces, FLOOR_1)
    d = deployment_of(doc, "mtp")
    assert (d["log_speedup"], d["log_speedup_coverage"]) == (None, 0.0)
    assert d["log_speedup_evidence"]["note"] == ("no logs speedup: this deployment ran at 8-9 running requests and "
                                                 "no-mtp at 18-21: never at comparable loads")
    # 6 intervals: 3 first of their file, 3 usable; the baseline: 4 usable (the first has no start)
    assert (d["log_speedup_evidence"]["usable_intervals"], d["log_speedup_evidence"]["baseline_usable_intervals"],
            d["log_speedup_evidence"]["left_out"]["without_start"]) == (3, 4, 3)
    assert (d["log_speedup_evidence"]["loads"], d["log_speedup_evidence"]["baseline_loads"]) == (
        [8.0, 9.0], [18.0, 21.0])
    assert curve(doc, "batch_bucket", "num_intervals", "baseline_intervals", "speedup") == [
        ("5-8", 1, 0, None), ("9-16", 2, 0, None)]
    # the verdict does not decide on an unmatched comparison, and names both loads
    v = next(x for x in doc["verdict"] if x["deployment_id"] == "mtp")
    assert (v["basis"], v["action"]) == ("logs", "inconclusive")
    assert "not matched on load, it ran at running requests 8-9 and no-mtp at running requests 18-21" in v["text"]


def test_sglang_logs_speedup_by_hand(tmp_path):
    # D: sglang#11948 (eagle3_tp0.log), 1 running: lines at :57 (first), :57, :58, :58, :58 and :59 (cut before
    # its throughput). The lines of one second are ordered within it (+ i/n s), so four usable intervals:
    # 178.86 over 0.5 s, 165.41 over 0.5 s, 188.68 over 1/3 s (333333 µs) and 165.59 over 333333 µs.
    # B: sglang#6949 without EAGLE (no_spec_qwq32b.log): :14 (first), :14, :15, :15, :15 (cut): 97.58 over 0.5 s,
    # 97.63 over 0.5 s, 97.50 over 333333 µs. Both at 1 running: D's tokens at B's seconds per token there over
    # D's seconds, i.e. the ratio of the two time-weighted mean throughputs.
    d_tokens = [178.86 * 0.5, 165.41 * 0.5, 188.68 * 0.333333, 165.59 * 0.333333]
    b_tokens = [97.58 * 0.5, 97.63 * 0.5, 97.50 * 0.333333]
    d_seconds, b_seconds = [0.5, 0.5, 0.333333, 0.333333], [0.5, 0.5, 0.333333]
    # tokens are kept to a millionth (89.43, 82.705, 62.893270, 55.196611 | 48.79, 48.815, 32.499967)

    def log_speedup(dt, ds, bt, bs):
        return sum(dt) * (sum(bs) / sum(bt)) / sum(ds)

    by_hand = log_speedup(d_tokens, d_seconds, b_tokens, b_seconds)
    assert round(by_hand, 4) == round(174.135 / 97.5788, 4) == 1.7846
    traces = tmp_path / "traces"
    import_log(traces, "sglang-log", [SGLANG / "eagle3_tp0.log"], "eagle3")
    import_log(traces, "sglang-log", [SGLANG / "no_spec_qwq32b.log"], "plain")
    d = deployment_of(report(tmp_path, traces, FLOOR_1), "eagle3")
    assert d["log_speedup"] == pytest.approx(by_hand, rel=1e-8)
    # The interval: each side's 4 and 3 intervals are its blocks of time (fewer than 256; too few for a longer
    # block). Delete each in turn, the other side whole: V = (K − 1)/K · Σ (θ_j − θ̄)², θ = ln(speedup)
    def jackknife(values):
        mean = sum(values) / len(values)
        return (len(values) - 1) / len(values) * sum((v - mean) ** 2 for v in values)

    def drop(xs, j):
        return xs[:j] + xs[j + 1:]

    v_d = jackknife([math.log(log_speedup(drop(d_tokens, j), drop(d_seconds, j), b_tokens, b_seconds))
                     for j in range(4)])
    v_b = jackknife([math.log(log_speedup(d_tokens, d_seconds, drop(b_tokens, j), drop(b_seconds, j)))
                     for j in range(3)])
    variance = d["matched"]["logs"]["variance"]
    assert variance["deployment"] == pytest.approx(v_d, rel=1e-4) and variance["baseline"] == pytest.approx(v_b, rel=1e-3)
    # Welch's df, (V_D + V_B)² / (V_D²/3 + V_B²/2): V_B is 1/7,800 of V_D, so about 3
    df = (v_d + v_b) ** 2 / (v_d ** 2 / 3 + v_b ** 2 / 2)
    assert d["matched"]["logs"]["df"] == pytest.approx(df, rel=1e-4) and 3 < df < 3.001
    low, high = d["log_speedup_interval"]
    # exp(θ ± t · √V): centred on the speedup (log scale), t just under Student's t(3) 97.5 % = 3.18245 (tables)
    assert math.sqrt(low * high) == pytest.approx(d["log_speedup"], rel=1e-12)
    t = math.log(high / low) / 2 / math.sqrt(v_d + v_b)
    assert 3.18 < t < 3.18245
    assert d["log_speedup_evidence"]["left_out"] == {"without_start": 1, "idle": 0, "without_throughput": 1,
                                                     "without_running": 0}


def test_without_a_baseline_log_the_note_names_the_import(tmp_path):
    traces = tmp_path / "traces"
    import_log(traces, "vllm-log", [VLLM / "v1_newest.log"], "mtp", "--year", "2025")
    d = deployment_of(report(tmp_path, traces), "mtp")
    assert d["log_speedup"] is None and d["log_speedup_coverage"] is None
    assert d["log_speedup_evidence"]["note"] == (
        "no logs speedup: no baseline: no none deployment with model m and target_quant bf16; import the log of a "
        "deployment that does not speculate, with the same --model, to decide it")


def test_the_counters_only_report_shows_the_logs_speedup(tmp_path, vllm_pair):
    text = report(tmp_path, vllm_pair, FLOOR_1, fmt="md")
    assert "Speedup from the engine logs (basis: logs)" in text
    shown = next(line for line in text.splitlines() if line.startswith("| mtp | plain |"))
    d = deployment_of(report(tmp_path, vllm_pair, FLOOR_1), "mtp")
    cells = [c.strip() for c in shown.strip("|").split("|")]
    # 72.0 / 41.7 = 1.727, without an interval (D's one interval is one block)
    assert cells[2] == with_interval(d["log_speedup"], None, None, suffix="×") == "1.73×"
    # coverage; then D's matched intervals and its running requests (1), B's intervals at the counts it logged at
    # least once (5 + 4) and their running requests (1 and 2); no "why not"
    assert cells[3] == "100.0%" and cells[4:] == ["1", "1", "9", "1-2", ""]
    assert "| mtp | 1 | 1 | 72.0 | 5 | 41.7 | 1.727× | yes |" in text
    # the baseline's intervals carry no drafts: the acceptance tables leave it out (the gates list it)
    counters = text.split("## Deployment gates")[0]
    assert not any(line.startswith("| plain |") for line in counters.splitlines())


def log_line(dep: str, end_s: float, running: int, tokens_per_s: float) -> dict:
    """One usable engine-log interval of 10 s, ending ``end_s`` seconds after the fixed instant."""
    return {"deployment_id": dep, "series": f"{dep} Engine 000", "start_time": at(1000 * (end_s - 10)),
            "end_time": at(1000 * end_s), "running_requests": running, "waiting_requests": 0,
            "generation_tokens_per_s": tokens_per_s, "source": "vllm_log"}


def test_a_count_between_two_the_baseline_logged_is_interpolated(tmp_path):
    """Lines written by hand, 10 s each, the default floor (10 lines a count's cell)."""
    lines = []
    # B: 10 lines at 4 running (400 tokens/s) and 10 at 8 (700); cell 17-18: 5 lines at 17 (1,000 tokens/s) and
    # 5 at 18 (1,500); cell 21-22: 5 at 21 and 5 at 22 (2,000 each). In time order, 10 s apart.
    b = [(4, 400.0)] * 10 + [(8, 700.0)] * 10 + [(17, 1000.0), (18, 1500.0), (21, 2000.0), (22, 2000.0)] * 5
    lines += [log_line("base", 10 * (i + 1), running, rate) for i, (running, rate) in enumerate(b)]
    # D: 3 lines at 19 running (3,000, 3,100, 2,900 tokens/s: 90,000 tokens in 30 s), 2 at 20 (3,300 and 3,500:
    # 68,000 in 20 s), 1 at 6 (900: 9,000) and 1 at 40 (4,000: 40,000)
    d = [(19, 3000.0), (20, 3300.0), (19, 3100.0), (6, 900.0), (20, 3500.0), (19, 2900.0), (40, 4000.0)]
    lines += [log_line("spec", 10 * (i + 1), running, rate) for i, (running, rate) in enumerate(d)]
    write_table(tmp_path, "deployments", [deployment("spec"), deployment("base", "none")])
    write_table(tmp_path, "intervals", lines)
    doc = report(tmp_path, tmp_path)
    spec = deployment_of(doc, "spec")
    # B's cells (seconds per token, the point = the token-weighted mean running count):
    #   17-18: 50,000 + 75,000 = 125,000 tokens in 100 s: 0.8 ms; point (50,000 · 17 + 75,000 · 18) / 125,000 = 17.6
    #   21-22: 200,000 tokens in 100 s: 0.5 ms; point 21.5
    # 21.5 ≤ 17.6 · 1.25 + 1 = 23: the counts between are interpolated,
    #   t0(19) = (2.5 · 0.8 + 1.4 · 0.5) / 3.9 = 2.7 / 3.9 ms,  t0(20) = (1.5 · 0.8 + 2.4 · 0.5) / 3.9 = 2.4 / 3.9 ms
    # D at 6: B's points 4 and 8 lie too far apart (8 > 4 · 1.25 + 1 = 6): not matched; D at 40: above 22, the
    # most B's highest cell held: not matched. So
    #   log_speedup = (90,000 · 2.7 + 68,000 · 2.4) / 3.9 ms / 50 s = 104.154 s / 50 s = 2.0831,
    #   coverage    = 158,000 / (158,000 + 9,000 + 40,000)
    by_hand = (90_000 * 2.7 + 68_000 * 2.4) / 3.9 / 1000 / 50
    assert spec["log_speedup"] == pytest.approx(by_hand, rel=1e-12)
    assert spec["log_speedup_coverage"] == pytest.approx(158 / 207, rel=1e-12)
    assert {k: spec["log_speedup_evidence"][k] for k in ("intervals", "baseline_intervals", "usable_intervals",
                                                          "baseline_usable_intervals", "loads", "baseline_loads",
                                                          "note")} == {
        "intervals": 5, "baseline_intervals": 40, "usable_intervals": 7, "baseline_usable_intervals": 40,
        "loads": [6.0, 40.0], "baseline_loads": [4.0, 22.0], "note": None}
    assert ("spec: the logs speedup covers 76.3% of the tokens in its usable log intervals; the rest ran at "
            "running-request counts its baseline never logged often enough ([evidence] min_log_intervals) or "
            "between counts too far apart ([evidence] max_load_gap)") in doc["notes"]
    # the jackknife's interval holds it, on the log scale around it
    low, high = spec["log_speedup_interval"]
    assert low < by_hand < high and math.sqrt(low * high) == pytest.approx(by_hand, rel=1e-12)
    # per bucket: 17-32 holds D's 19s and 20s, all matched; 5-8 (D at 6) and 33-64 (D at 40) nothing
    assert curve(doc, "batch_bucket", "num_intervals", "generated_tokens", "baseline_intervals", "counted") == [
        ("5-8", 1, 9000.0, 10, False), ("17-32", 5, 158000.0, 20, True), ("33-64", 1, 40000.0, 0, False)]
    row = doc["log_load_curve"][1]
    assert row["speedup"] == pytest.approx(by_hand, rel=1e-12)
    # B's pooled throughput in the bucket, (125,000 + 200,000) / 200 s, is not what D is compared with
    assert row["baseline_generation_tokens_per_s"] == pytest.approx(1625.0, rel=1e-12)
    # the jackknife is deterministic: [intervals] seed and replicates (the accept length's bootstrap) leave it
    again = deployment_of(report(tmp_path, tmp_path, "[intervals]\nreplicates = 300\nseed = 8\n"), "spec")
    assert again["log_speedup_interval"] == spec["log_speedup_interval"]
