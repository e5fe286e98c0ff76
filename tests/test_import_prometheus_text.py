"""specan import prometheus on the text exposition format (`curl /metrics`, OpenMetrics).

The inputs are under tests/fixtures/prometheus_text/ (SOURCES.md says which lines are real and which
we wrote from the format). Every expected count carries its arithmetic in a comment.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import pytest

from analyzer.ingest.importers import ImportInputError
from analyzer.ingest.importers.prometheus import SGLANG_DEFINITION, import_prometheus, name_time
from imported import rows, run, t

TEXT = Path(__file__).parent / "fixtures" / "prometheus_text"
UTC = dt.timezone.utc
DP = [TEXT / "vllm_v1_dp-20250901T143000Z.txt", TEXT / "vllm_v1_dp-20250901T143100Z.txt"]
QWEN = [TEXT / "vllm_v1_qwen36_metrics.txt", TEXT / "vllm_v1_qwen36_metrics-20260507T101500Z.txt"]
V0 = [TEXT / "vllm_v0_metrics-20241016T190547Z.txt", TEXT / "vllm_v0_metrics-20241016T190647Z.txt"]
LLAMACPP = [TEXT / "llamacpp_metrics-20260801T120000Z.txt", TEXT / "llamacpp_metrics-20260801T120100Z.txt"]


def counts(row: dict) -> tuple:
    return row["num_drafts"], row["num_draft_tokens"], row["num_accepted_tokens"], row["accepted_per_position"]


def exit_2(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def no_files(root: Path) -> bool:
    return not root.exists() or not any(root.rglob("*.parquet"))


# --------------------------------------------------------------------------- vLLM V1, one snapshot per file


def test_two_snapshots_timed_by_their_file_names(tmp_path):
    out = tmp_path / "t"
    result = run("import", "prometheus", *DP, "--deployment", "dp", "--out", out)
    assert result.exit_code == 0, result.output
    got = {r["series"]: r for r in rows(out, "intervals")}
    e0, e1 = (f"engine={e},model_name=/home/models/Qwen3-0.6B" for e in "01")
    assert set(got) == {e0, e1}          # one series per engine (label group), not one summed row
    for row in got.values():             # the times in the file names
        assert (row["start_time"], row["end_time"]) == (t("2025-09-01T14:30:00"), t("2025-09-01T14:31:00"))
        assert row["source"] == "prometheus"
    # engine 0: drafts 22 → 122, draft tokens 88 → 488, accepted 14 → 140, per position [7, 4, 2, 1] →
    # [67, 40, 22, 11]: the deltas
    assert counts(got[e0]) == (122 - 22, 488 - 88, 140 - 14, [67 - 7, 40 - 4, 22 - 2, 11 - 1])
    # engine 1 restarted: drafts fell 15 → 12, so every counter's new value is its delta, including accepted,
    # which had already climbed back above its old value (19 → 20: 20, not 1) and position 1 (6 → 6: 6, not 0)
    assert counts(got[e1]) == (12, 48, 20, [10, 6, 3, 1])
    assert "dp: 1 counter reset (a counter decreased: a restart)" in result.stdout
    # the _created series look like counters by name and jumped at the restart: skipped, never counted
    # ((3 counters + 4 positions) × 2 engines = 14 per snapshot, 2 snapshots)
    assert "       28  `_created` sample (a counter's creation time, not a count)" in result.stdout
    assert "/metrics snapshot times: 2 files by the time in their names" in result.stdout
    (dep,) = rows(out, "deployments")
    assert dep == {"deployment_id": "dp", "model": "/home/models/Qwen3-0.6B", "method": "unknown",
                   "num_speculative_tokens": 4}


def test_label_pairs_map_engines_to_deployments(tmp_path):
    out = tmp_path / "t"
    result = run("import", "prometheus", *DP, "--deployment", "engine=0:a,engine=1:b", "--out", out)
    assert result.exit_code == 0, result.output
    assert sorted((r["deployment_id"], r["num_drafts"]) for r in rows(out, "intervals")) == [("a", 100), ("b", 12)]


def test_a_pair_that_matches_no_series_is_exit_2_naming_the_values_present(tmp_path):
    result = run("import", "prometheus", *DP, "--deployment", "engine=0:a,engine=2:c", "--out", tmp_path / "t")
    exit_2(result, "--deployment engine=2:c: matches no spec-decode series", 'engine values present: "0", "1"')
    result = run("import", "prometheus", *DP, "--deployment", "replica=r1:a", "--out", tmp_path / "t")
    exit_2(result, "no series has a replica label; labels present: engine, model_name")
    assert no_files(tmp_path / "t")


# --------------------------------------------------------------------------- times


def test_sample_timestamps_win_over_a_time_in_the_file_name(tmp_path):
    # three /federate-style scrapes concatenated, each sample with its millisecond timestamp; the name's
    # time (2099) must not be used
    src = tmp_path / "federate-2099-01-01T00:00:00Z.txt"
    shutil.copy(TEXT / "vllm_federate_concatenated.txt", src)
    out = tmp_path / "t"
    result = run("import", "prometheus", src, "--deployment", "engine=0:e0,engine=1:e1", "--out", out)
    assert result.exit_code == 0, result.output
    got = sorted(rows(out, "intervals"), key=lambda r: (r["deployment_id"], r["end_time"]))
    t0, t1, t2 = t("2026-09-02T12:00:00"), t("2026-09-02T12:00:15"), t("2026-09-02T12:00:30")
    assert [(r["deployment_id"], r["start_time"], r["end_time"]) for r in got] == [
        ("e0", t0, t1), ("e0", t1, t2), ("e1", t0, t1), ("e1", t1, t2)]
    assert [counts(r) for r in got] == [
        # engine 0: drafts 1000 → 1100 → 1250, draft tokens 3000 → 3300 → 3750, accepted 1500 → 1680 → 1950
        (100, 300, 180, [780 - 700, 560 - 500, 340 - 300]),
        (150, 450, 270, [900 - 780, 650 - 560, 400 - 340]),
        # engine 1 (names without _total): 2000 → 2050 → 2050, idle in the last interval
        (50, 150, 60, [30, 20, 10]),
        (0, 0, 0, [0, 0, 0]),
    ]
    assert "/metrics snapshot times: 1 file by its sample timestamps" in result.stdout


def test_openmetrics_expositions_each_ending_with_eof(tmp_path):
    out = tmp_path / "t"
    result = run("import", "prometheus", TEXT / "vllm_openmetrics_two_expositions.txt", "--deployment", "om",
                 "--out", out)
    assert result.exit_code == 0, result.output
    (row,) = rows(out, "intervals")
    # OpenMetrics timestamps are seconds: 1756737000 → 1756737060
    assert (row["start_time"], row["end_time"]) == (t("2025-09-01T14:30:00"), t("2025-09-01T14:31:00"))
    # drafts 40 → 100, draft tokens 80 → 200, accepted 50 → 110, positions [30, 20] → [70, 40]
    assert counts(row) == (60, 120, 60, [40, 20])
    # OpenMetrics puts _created inside the counter family: 3 counters + 2 positions, 2 expositions
    assert "       10  `_created` sample" in result.stdout


def test_time_option_dates_the_snapshot_without_a_time(tmp_path):
    out = tmp_path / "t"
    # the first file is the real scrape of vllm PR #41916: no sample timestamps, no time in its name
    summary = import_prometheus(QWEN, out, "q", time="2026-05-07T10:00:00Z")
    (row,) = rows(out, "intervals")
    assert (row["start_time"], row["end_time"]) == (t("2026-05-07T10:00:00"), t("2026-05-07T10:15:00"))
    # 6.491797e6 → 6.503797e6 drafts (= draft tokens: one speculative token), 5.193438e6 → 5.203038e6 accepted
    assert counts(row) == (12_000, 12_000, 9_600, [9_600])
    assert any("by --time" in text for _, text in summary.notes)
    assert rows(out, "deployments")[0]["model"] == "Qwen/Qwen3.6-35B-A3B-FP8"


def test_iso_time_with_colons_in_the_file_name(tmp_path):
    first = tmp_path / "metrics-2026-05-07T10:00:00Z.txt"
    shutil.copy(QWEN[0], first)
    out = tmp_path / "t"
    result = run("import", "prometheus", first, QWEN[1], "--deployment", "q", "--out", out)
    assert result.exit_code == 0, result.output
    assert rows(out, "intervals")[0]["start_time"] == t("2026-05-07T10:00:00")


def test_name_times():
    us = lambda text: int(t(text).timestamp()) * 1_000_000  # noqa: E731
    assert name_time(Path("metrics-2026-11-28T12:00:30Z.txt")) == (us("2026-11-28T12:00:30"), True)
    assert name_time(Path("m-20261128T120030Z.prom")) == (us("2026-11-28T12:00:30"), True)
    assert name_time(Path("m-2026-11-28T12-00-30+01:00.txt")) == (us("2026-11-28T11:00:30"), True)
    assert name_time(Path("m-2026-11-28T12:00:30.txt")) == (us("2026-11-28T12:00:30"), False)   # read as UTC
    assert name_time(Path("metrics.txt")) is None
    with pytest.raises(ImportInputError, match="not a real date"):
        name_time(Path("m-2026-02-30T12:00:00Z.txt"))


def test_no_time_at_all_takes_the_files_modification_time(tmp_path):
    # the real scrape of vllm PR #41916 as `curl -o` would have saved it at 10:00:00Z
    first = tmp_path / "metrics.txt"
    shutil.copy(QWEN[0], first)
    saved = t("2026-05-07T10:00:00").timestamp()
    os.utime(first, (saved, saved))
    out = tmp_path / "t"
    result = run("import", "prometheus", first, QWEN[1], "--deployment", "q", "--out", out)
    assert result.exit_code == 0, result.output
    (row,) = rows(out, "intervals")
    assert (row["start_time"], row["end_time"]) == (t("2026-05-07T10:00:00"), t("2026-05-07T10:15:00"))
    # 6.491797e6 → 6.503797e6 drafts and draft tokens, 5.193438e6 → 5.203038e6 accepted and position 0
    assert counts(row) == (12_000, 12_000, 9_600, [9_600])
    assert "dated by the file's modification time, 2026-05-07T10:00:00Z" in result.stdout
    assert "`curl -o`" in result.stdout
    # --time dates one snapshot, not two
    other = tmp_path / "copy.txt"
    shutil.copy(QWEN[1], other)
    with pytest.raises(ImportInputError, match="--time dates one snapshot, but 2 files"):
        import_prometheus([QWEN[0], other], tmp_path / "t2", "q", time="2026-05-07T10:00:00Z")
    with pytest.raises(ImportInputError, match="--time 'yesterday': expected an ISO-8601 time"):
        import_prometheus(QWEN, tmp_path / "t2", "q", time="yesterday")


def test_concatenated_snapshots_without_timestamps_are_exit_2(tmp_path):
    both = tmp_path / "both-2025-09-01T14:30:00Z.txt"
    both.write_text(DP[0].read_text() + DP[1].read_text())
    result = run("import", "prometheus", both, "--deployment", "dp", "--out", tmp_path / "t")
    exit_2(result, "several snapshots in one file without sample timestamps")
    # OpenMetrics without timestamps: the second exposition after a # EOF
    om = tmp_path / "om-2025-09-01T14:30:00Z.txt"
    om.write_text("".join(line.rsplit(" ", 1)[0] + "\n" if line[:1] not in ("#", "") else line + "\n"
                          for line in (TEXT / "vllm_openmetrics_two_expositions.txt").read_text().splitlines()))
    result = run("import", "prometheus", om, "--deployment", "dp", "--out", tmp_path / "t")
    exit_2(result, "several snapshots in one file without sample timestamps", "after a # EOF")


def test_one_scrape_is_one_interval_from_the_counters_created_time(tmp_path):
    # vllm:spec_decode_num_draft_tokens_created / num_accepted_tokens_created 1.7769243940322702e+09
    # (vllm PR #41916): counting from 0 since 2026-04-23T06:06:34.032270Z, to the scrape named 10:15:00Z
    out = tmp_path / "t"
    result = run("import", "prometheus", QWEN[1], "--deployment", "q", "--out", out)
    assert result.exit_code == 0, result.output
    (row,) = rows(out, "intervals")
    assert (row["start_time"], row["end_time"]) == (t("2026-04-23T06:06:34.032270"), t("2026-05-07T10:15:00"))
    # the counters' values are the counts: 6.503797e6 drafts = draft tokens, 5.203038e6 accepted = position 0
    assert counts(row) == (6_503_797, 6_503_797, 5_203_038, [5_203_038])
    assert "one scrape, so one interval from its counters' `_created` time (2026-04-23T06:06:34Z" in result.stdout
    # the real scrape alone, dated by its modification time (as `curl -o` leaves it)
    alone = tmp_path / "metrics.txt"
    shutil.copy(QWEN[0], alone)
    saved = t("2026-05-07T10:00:00").timestamp()
    os.utime(alone, (saved, saved))
    result = run("import", "prometheus", alone, "--deployment", "q", "--out", tmp_path / "t2")
    assert result.exit_code == 0, result.output
    (row,) = rows(tmp_path / "t2", "intervals")
    assert (row["start_time"], row["end_time"]) == (t("2026-04-23T06:06:34.032270"), t("2026-05-07T10:00:00"))
    assert counts(row) == (6_491_797, 6_491_797, 5_193_438, [5_193_438])


def test_one_scrape_without_created_is_exit_2(tmp_path):
    # llama.cpp writes no `_created` samples: one scrape has no start
    result = run("import", "prometheus", LLAMACPP[0], "--deployment", "lc", "--out", tmp_path / "t")
    exit_2(result, "nothing to import", "no `_created` time", "difference of two snapshots")
    assert no_files(tmp_path / "t")


# --------------------------------------------------------------------------- other engines


def test_vllm_v0_names_are_recognised_but_not_counted(tmp_path):
    # V0 incremented its counters by cumulative totals (a sum of sums): a difference is not an interval's count
    result = run("import", "prometheus", *V0, "--deployment", "v0", "--out", tmp_path / "t")
    exit_2(result, "nothing to import: vLLM V0 counters", "specan import vllm-log")
    assert no_files(tmp_path / "t")
    # beside V1 engines: the V1 series import, the V0 group is skipped with a note
    out = tmp_path / "mixed"
    result = run("import", "prometheus", *V0, *DP, "--deployment", "x", "--out", out)
    assert result.exit_code == 0, result.output
    assert len(rows(out, "intervals")) == 2
    assert "carries vLLM V0 metrics" in result.stdout and "vllm-project/vllm#15415" in result.stdout


def test_llamacpp_counters(tmp_path):
    out = tmp_path / "t"
    result = run("import", "prometheus", *LLAMACPP, "--deployment", "lc", "--out", out)
    assert result.exit_code == 0, result.output
    (row,) = rows(out, "intervals")
    assert "series" not in row          # llama.cpp's series carry no labels
    # drafts 200 → 260, draft tokens 590 → 770, accepted 410 → 520, positions [180, 140, 90] → [230, 175, 115]
    assert counts(row) == (60, 180, 110, [50, 35, 25])
    assert rows(out, "deployments")[0]["num_speculative_tokens"] == 3


TRTLLM = [TEXT / "trtllm_metrics-20260401T090000Z.txt", TEXT / "trtllm_metrics-20260401T090100Z.txt"]


def test_tensorrt_llm_counters(tmp_path):
    out = tmp_path / "t"
    result = run("import", "prometheus", *TRTLLM, "--deployment", "trt", "--out", out)
    assert result.exit_code == 0, result.output
    (row,) = rows(out, "intervals")
    assert row["series"] == "engine_type=trtllm,model_name=nemotron-nano-3"
    assert (row["start_time"], row["end_time"]) == (t("2026-04-01T09:00:00"), t("2026-04-01T09:01:00"))
    # draft tokens 4200 → 5400, accepted 2688 → 3420; TensorRT-LLM counts no drafts and no positions
    assert counts(row) == (None, 1_200, 732, None)
    # its two gauges are levels of the last iteration: recognised, skipped, one per snapshot each
    assert "        4  TensorRT-LLM trtllm_spec_decode_acceptance_length / draft_overhead gauge" in result.stdout
    assert rows(out, "deployments")[0]["model"] == "nemotron-nano-3"
    # one scrape: from the counters' _created time, 2026-04-01T08:00:00Z, the values are the counts
    result = run("import", "prometheus", TRTLLM[0], "--deployment", "trt", "--out", tmp_path / "one")
    assert result.exit_code == 0, result.output
    (row,) = rows(tmp_path / "one", "intervals")
    assert (row["start_time"], row["end_time"]) == (t("2026-04-01T08:00:00"), t("2026-04-01T09:00:00"))
    assert counts(row) == (None, 4_200, 2_688, None)


def test_sglang_gauge_alone_is_exit_2(tmp_path):
    # SGLang exports spec decoding only as gauges: levels, no counts to make an interval of
    result = run("import", "prometheus", TEXT / "sglang_metrics-20251002T234216Z.txt", "--deployment", "sg",
                 "--out", tmp_path / "t")
    exit_2(result, "only SGLang's sglang:spec_accept_length gauge", "specan import sglang-responses")


def test_accept_length_gauge_is_kept_as_reported_never_differenced(tmp_path):
    # written by us: no engine we found exports the gauge beside counters of the same label group; this checks
    # the rule, the level at the interval's end, not a difference of two levels
    labels = 'model_name="m"'

    def snapshot(drafts, tokens, accepted, length):
        return (f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}\n"
                f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {tokens}\n"
                f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}\n"
                f"# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{{{labels}}} {length}\n")
    a, b = tmp_path / "m-2026-01-01T00:00:00Z.txt", tmp_path / "m-2026-01-01T00:01:00Z.txt"
    a.write_text(snapshot(10, 30, 15, 2.5))
    b.write_text(snapshot(30, 90, 35, 2.0))
    out = tmp_path / "t"
    result = run("import", "prometheus", a, b, "--deployment", "g", "--out", out)
    assert result.exit_code == 0, result.output
    (row,) = rows(out, "intervals")
    assert counts(row) == (20, 60, 20, None)
    # 2.0 as reported at 00:01, not 2.0 − 2.5
    assert (row["reported_accept_length"], row["reported_accept_length_definition"]) == (2.0, SGLANG_DEFINITION)
    assert "kept as reported and never differenced" in result.stdout


# --------------------------------------------------------------------------- input that is not a scrape


def test_a_file_with_nothing_to_import_is_exit_2_naming_it(tmp_path):
    other = tmp_path / "node-2026-01-01T00:00:00Z.txt"
    other.write_text("# TYPE node_load1 gauge\nnode_load1 0.5\n"
                     "vllm:spec_decode_num_drafts_created{engine=\"0\"} 1.7e9\n")   # a _created alone counts nothing
    result = run("import", "prometheus", other, *DP, "--deployment", "x", "--out", tmp_path / "t")
    exit_2(result, "node-2026-01-01T00:00:00Z.txt: nothing to import: no speculative-decoding series",
           "vllm:spec_decode_num_drafts")


def test_not_the_exposition_format_is_exit_2_naming_file_and_line(tmp_path):
    log = tmp_path / "server.txt"
    log.write_text("# a comment\nINFO 05-30 07:48:55 Starting vLLM API server\n")
    result = run("import", "prometheus", log, "--deployment", "x", "--out", tmp_path / "t")
    exit_2(result, "server.txt:2: not the Prometheus text format", "expected a /metrics scrape")
    cut = tmp_path / "cut.txt"       # an OpenMetrics exposition cut short after a complete one
    text = (TEXT / "vllm_openmetrics_two_expositions.txt").read_text()
    cut.write_text(text[: text.rindex("# EOF")])
    result = run("import", "prometheus", cut, "--deployment", "x", "--out", tmp_path / "t")
    exit_2(result, "cut.txt:", "not the OpenMetrics", "a truncated scrape?")
