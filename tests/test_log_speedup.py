"""The speedup from engine logs alone (basis: logs; views log_speedup, log_speedup_by_batch,
log_speedup_intervals; docs/metrics.md "Speedup from engine logs"), through the CLI as a user
runs it: `specan import vllm-log|sglang-log` for both deployments, then `specan report`.
Every fixture line is real (tests/fixtures/*/SOURCES.md); every number is worked out by hand
from the lines below."""

from __future__ import annotations

import json
import math

import pytest

from analyzer.analysis.config import Config
from analyzer.analysis.precision import with_interval

from imported import run
from test_import_sglang_log import LOGS as SGLANG
from test_vllm_log_layouts import LOGS as VLLM


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


def deployment(doc: dict, dep: str) -> dict:
    return next(d for d in doc["deployments"] if d["deployment_id"] == dep)


FLOOR_1 = "[evidence]\nmin_log_intervals = 1\n"
REPLICATES = Config().intervals.replicates


@pytest.fixture
def vllm_pair(tmp_path):
    # D: club-3090#105 (v1_newest.log), MTP, two ticks at 1 running: 16:25:09 (the first: no start) and
    # 16:25:19, 72.0 tokens/s over 10 s. B: vllm#12314, plain decoding: 1 running at 41.7, 41.5, 41.8,
    # 41.8 and 41.7 tokens/s over 5 s each after its first line, and 2 running in the other excerpt.
    traces = tmp_path / "traces"
    import_log(traces, "vllm-log", [VLLM / "v1_newest.log"], "mtp", "--year", "2025")
    import_log(traces, "vllm-log", [VLLM / "baseline_v0_pending.log", VLLM / "baseline_v0_pending_two_running.log"],
               "plain", "--year", "2025")
    return traces


def test_vllm_logs_speedup_by_hand(tmp_path, vllm_pair):
    doc = report(tmp_path, vllm_pair, FLOOR_1)
    d = deployment(doc, "mtp")
    # bucket 1: tokens_D = 72.0 · 10 = 720 over 10 s; thr_B = (41.7 + 41.5 + 41.8 + 41.8 + 41.7) · 5 / 25 =
    # 208.5 / 5 = 41.7; the baseline would take 720 / 41.7 = 17.266 s: 17.266 / 10 = 72.0 / 41.7
    assert d["log_speedup"] == pytest.approx(72.0 / 41.7, rel=1e-12)
    assert d["log_speedup_coverage"] == 1.0          # D logged bucket 1 only
    lo, hi = d["log_speedup_interval"]
    # every replicate weighs B's five lines anew: its throughput stays within [41.5, 41.8]
    assert 72.0 / 41.8 - 1e-12 <= lo <= d["log_speedup"] <= hi <= 72.0 / 41.5 + 1e-12
    assert d["log_speedup_evidence"] == {
        "buckets": 1, "intervals": 1, "baseline_intervals": 5, "min_intervals": 1, "usable_intervals": 1,
        # B: 5 + 4 usable lines (each file's first has no start)
        # the replicates in which D's one interval weighs 0 (Poisson(1) = 0: e^-1 of them) have no speedup;
        # of the default 16,000: 16,000 · (1 − e^-1) = 10,114, binomial spread ±61 (within 4 of it)
        "baseline_usable_intervals": 9, "replicates": pytest.approx(REPLICATES * (1 - math.exp(-1)),
                                                                    abs=4 * math.sqrt(REPLICATES * 0.2325)),
        "left_out": {"without_start": 1, "idle": 0, "without_throughput": 0, "without_running": 0}, "note": None}
    assert doc["log_load_curve"] == [{
        "deployment_id": "mtp", "baseline_id": "plain", "batch_bucket": "1", "num_intervals": 1, "seconds": 10.0,
        "generated_tokens": 720.0, "generation_tokens_per_s": 72.0, "baseline_intervals": 5, "baseline_seconds": 25.0,
        "baseline_generation_tokens_per_s": pytest.approx(41.7), "baseline_seconds_for_tokens": pytest.approx(720 / 41.7),
        "speedup": pytest.approx(72.0 / 41.7), "counted": True}]
    assert deployment(doc, "plain")["log_speedup"] is None       # a baseline has none
    assert "mtp: 1 of 2 log intervals left out of the logs speedup: 1 without a start" in doc["notes"]


def test_a_bucket_resting_on_one_line_does_not_decide(tmp_path, vllm_pair):
    # the default floor: 10 usable intervals of each side in a bucket; D has 1 and B 5 at 1 running
    doc = report(tmp_path, vllm_pair)
    d = deployment(doc, "mtp")
    assert d["log_speedup"] is None and d["log_speedup_interval"] is None
    assert d["log_speedup_coverage"] == 0.0
    note = ("not enough data: no batch bucket both logged has 10 usable log intervals of each (the most: 1; "
            "[evidence] min_log_intervals)")
    assert d["log_speedup_evidence"]["note"] == note and f"mtp: {note}" in doc["notes"]
    assert doc["log_load_curve"][0]["counted"] is False and doc["log_load_curve"][0]["speedup"] == pytest.approx(
        72.0 / 41.7)                                      # the curve still shows the bucket


def test_two_buckets_weigh_by_the_deployments_time_and_the_floor_cuts_coverage(tmp_path):
    # D: vllm#43295's MTP deployment. Usable intervals (10 s each): 10:25:33 at 9 running, 972.4 tokens/s;
    # 10:27:13 at 9, 929.6; 10:30:43 at 8, 1004.4. B: tt-inference-server#3359, plain decoding: 07:51:49 at 8
    # running, 71.6; 07:51:59 at 7, 132.0; 08:01:49 at 9, 7.2; 08:01:59 at 10, 5.7; 08:02:09 at 10, 7.2.
    traces = tmp_path / "traces"
    import_log(traces, "vllm-log", [VLLM / f"mtp_newest_{t}.log" for t in ("1025", "1027", "1030")], "mtp",
               "--year", "2026")
    import_log(traces, "vllm-log", [VLLM / "baseline_shipper_times_0751.log", VLLM / "baseline_shipper_times_0801.log"],
               "plain", "--year", "2026")
    # 5-8: D 1004.4 · 10 = 10044 tokens; thr_B = (71.6 + 132.0) · 10 / 20 = 101.8; B needs 10044 / 101.8 s.
    # 9-16: D (972.4 + 929.6) · 10 = 19020 tokens; thr_B = (7.2 + 5.7 + 7.2) · 10 / 30 = 6.7; 19020 / 6.7 s.
    both = (10044 / 101.8 + 19020 / 6.7) / 30
    d = deployment(report(tmp_path, traces, FLOOR_1), "mtp")
    assert d["log_speedup"] == pytest.approx(both, rel=1e-12) and d["log_speedup_coverage"] == 1.0
    assert (d["log_speedup_evidence"]["buckets"], d["log_speedup_evidence"]["intervals"],
            d["log_speedup_evidence"]["baseline_intervals"]) == (2, 3, 5)
    # floor 2: D's one line at 5-8 no longer counts; 9-16 alone, over 19020 of 29064 tokens
    d = deployment(report(tmp_path, traces, "[evidence]\nmin_log_intervals = 2\n"), "mtp")
    assert d["log_speedup"] == pytest.approx(19020 / 6.7 / 20, rel=1e-12)
    assert d["log_speedup_coverage"] == pytest.approx(19020 / 29064, rel=1e-12)


def test_the_same_deployment_with_and_without_mtp_never_shared_a_load(tmp_path):
    # vllm#43295: the same model, config and benchmark, with and without MTP. With MTP it ran 8-9 requests
    # at a time, without 18-21: no bucket in common, so no speedup at equal load can be formed.
    traces = tmp_path / "traces"
    import_log(traces, "vllm-log", [VLLM / f"mtp_newest_{t}.log" for t in ("1025", "1027", "1030")], "mtp",
               "--year", "2026")
    import_log(traces, "vllm-log", [VLLM / "baseline_newest_no_mtp.log"], "no-mtp", "--year", "2026")
    doc = report(tmp_path, traces, FLOOR_1)
    d = deployment(doc, "mtp")
    assert (d["log_speedup"], d["log_speedup_coverage"]) == (None, 0.0)
    assert d["log_speedup_evidence"]["note"] == ("no logs speedup: this deployment and no-mtp never logged the same "
                                                 "batch bucket of running requests")
    # 6 intervals: 3 first of their file, 3 usable; the baseline: 4 usable (the first has no start)
    assert (d["log_speedup_evidence"]["usable_intervals"], d["log_speedup_evidence"]["baseline_usable_intervals"],
            d["log_speedup_evidence"]["left_out"]["without_start"]) == (3, 4, 3)
    assert [(r["batch_bucket"], r["num_intervals"], r["baseline_intervals"], r["speedup"])
            for r in doc["log_load_curve"]] == [("5-8", 1, 0, None), ("9-16", 2, 0, None)]


def test_sglang_logs_speedup_by_hand(tmp_path):
    # D: sglang#11948 (eagle3_tp0.log), 1 running: lines at :57 (first), :57, :58, :58, :58 and :59 (cut before
    # its throughput). The lines of one second are ordered within it (+ i/n s), so four usable intervals:
    # 178.86 over 0.5 s, 165.41 over 0.5 s, 188.68 over 1/3 s (333333 µs) and 165.59 over 333333 µs.
    # B: sglang#6949 without EAGLE (no_spec_qwq32b.log): :14 (first), :14, :15, :15, :15 (cut): 97.58 over 0.5 s,
    # 97.63 over 0.5 s, 97.50 over 333333 µs. Each side is its time-weighted mean throughput.
    d_side = (178.86 * 500_000 + 165.41 * 500_000 + 188.68 * 333_333 + 165.59 * 333_333) / 1_666_666
    b_side = (97.58 * 500_000 + 97.63 * 500_000 + 97.50 * 333_333) / 1_333_333
    assert (round(d_side, 4), round(b_side, 4)) == (174.135, 97.5788)
    traces = tmp_path / "traces"
    import_log(traces, "sglang-log", [SGLANG / "eagle3_tp0.log"], "eagle3")
    import_log(traces, "sglang-log", [SGLANG / "no_spec_qwq32b.log"], "plain")
    d = deployment(report(tmp_path, traces, FLOOR_1), "eagle3")
    assert d["log_speedup"] == pytest.approx(d_side / b_side, rel=1e-12)
    # the bootstrap resamples intervals: its ends lie within the ratios one interval of each side can give
    low, high = d["log_speedup_interval"]
    assert 165.41 / 97.63 - 1e-12 <= low <= d["log_speedup"] <= high <= 188.68 / 97.50 + 1e-12
    assert d["log_speedup_evidence"]["left_out"] == {"without_start": 1, "idle": 0, "without_throughput": 1,
                                                     "without_running": 0}


def test_without_a_baseline_log_the_note_names_the_import(tmp_path):
    traces = tmp_path / "traces"
    import_log(traces, "vllm-log", [VLLM / "v1_newest.log"], "mtp", "--year", "2025")
    d = deployment(report(tmp_path, traces), "mtp")
    assert d["log_speedup"] is None and d["log_speedup_coverage"] is None
    assert d["log_speedup_evidence"]["note"] == (
        "no logs speedup: no baseline: no none deployment with model m and target_quant bf16; import the log of a "
        "deployment that does not speculate, with the same --model, to decide it")


def test_the_counters_only_report_shows_the_logs_speedup(tmp_path, vllm_pair):
    text = report(tmp_path, vllm_pair, FLOOR_1, fmt="md")
    assert "Speedup from the engine logs (basis: logs)" in text
    shown = next(line for line in text.splitlines() if line.startswith("| mtp | plain |"))
    d = deployment(report(tmp_path, vllm_pair, FLOOR_1), "mtp")
    cells = [c.strip() for c in shown.strip("|").split("|")]
    assert cells[2] == with_interval(d["log_speedup"], *d["log_speedup_interval"], suffix="×")
    assert cells[3:] == ["100.0%", "1", "1", "5", ""]
    assert "| mtp | 1 | 1 | 72.0 | 5 | 41.7 | 1.727× | yes |" in text
    # the baseline's intervals carry no drafts: the acceptance tables leave it out (the gates list it)
    counters = text.split("## Deployment gates")[0]
    assert not any(line.startswith("| plain |") for line in counters.splitlines())


def test_the_bootstrap_follows_replicates_and_seed(tmp_path, vllm_pair):
    first = deployment(report(tmp_path, vllm_pair, FLOOR_1 + "[intervals]\nreplicates = 300\nseed = 7\n"), "mtp")
    again = deployment(report(tmp_path, vllm_pair, FLOOR_1 + "[intervals]\nreplicates = 300\nseed = 7\n"), "mtp")
    other = deployment(report(tmp_path, vllm_pair, FLOOR_1 + "[intervals]\nreplicates = 300\nseed = 8\n"), "mtp")
    assert first["log_speedup_interval"] == again["log_speedup_interval"]
    assert first["log_speedup_interval"] != other["log_speedup_interval"]
    assert 0 < first["log_speedup_evidence"]["replicates"] <= 300
