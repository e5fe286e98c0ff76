"""`specan import vllm-log` on real log lines of every layout vLLM printed since 2024
(tests/fixtures/vllm_logs/, each file's source in SOURCES.md). Every expected value is
worked out by hand from the lines, and the arithmetic between a line's own fields is
checked: the printed rates against the counts, V0's efficiency against its counters,
the mean acceptance length against 1 + Σ per-position rates."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analyzer.cli import main
from analyzer.ingest.importers.vllm_log import parse_metrics

LOGS = Path(__file__).resolve().parent / "fixtures" / "vllm_logs"
UTC = dt.timezone.utc


def t(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def imported(tmp_path, name: str) -> tuple[list[dict], str]:
    out = tmp_path / "traces"
    result = CliRunner().invoke(main, ["import", "vllm-log", str(LOGS / name), "--deployment", "d",
                                       "--year", "2025", "--out", str(out)])
    assert result.exit_code == 0, result.output
    got = [row for path in sorted((out / "intervals").glob("*.parquet"))
           for row in pq.read_table(path, partitioning=None).to_pylist()]
    return sorted(got, key=lambda r: (r.get("series") or "", r["end_time"])), result.stdout


def pick(row: dict, *names: str) -> tuple:
    return tuple(row.get(n) for n in names)


COUNTS = ("start_time", "end_time", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position")
LOAD = ("running_requests", "waiting_requests", "generation_tokens_per_s", "kv_cache_usage")


def test_v0_cumulative_lines_become_differences(tmp_path):
    # vLLM 0.5.x: `Number of draft tokens tokens:` and `Number of emitted tokens tokens:`, k = 16.
    # Line 2: draft 42272, emitted 2642, accepted 0; line 7: 51056, 3191, 0.
    # Arithmetic of a V0 line: efficiency = emitted / (steps · (k + 1)) = 2642 / (42272 / 16 · 17) = 0.0588 → 0.059
    assert round(2642 / (42272 / 16 * 17), 3) == 0.059 and round(3191 / (51056 / 16 * 17), 3) == 0.059
    (first, row), stdout = imported(tmp_path, "v0_0.5_cumulative.log")
    # line 2 counts from the engine's start: 42272 drafted in 42272 / 16 = 2642 steps, which emitted 2642
    # tokens: an accepted prefix of 2642 − 2642 = 0; its start is unknown
    assert pick(first, *COUNTS) == (None, t("2025-07-24T04:00:31"), 2642, 42272, 0, None)
    # its load line (Running 2, Pending 0, KV 0.8 %) is when it ended; the 127.4 tokens/s cover the last tick only
    assert pick(first, *LOAD) == (2, 0, None, pytest.approx(0.008))
    # 8784 drafted in 8784 / 16 = 549 steps, which emitted 549 tokens: an accepted prefix of 549 − 549 = 0
    assert pick(row, *COUNTS) == (t("2025-07-24T04:00:31"), t("2025-07-24T04:00:36"), 549, 8784, 0, None)
    # the V0 throughput line before it: Running 2, Pending 0, 110.4 tokens/s, KV 0.3 %
    assert pick(row, *LOAD) == (2, 0, 110.4, pytest.approx(0.003))
    assert "1 interval from the engine's start" in stdout and "layouts read: v0 (2)" in stdout
    assert "disagree" not in stdout


def test_v0_accepted_prefix_comes_from_emitted_tokens(tmp_path):
    # vLLM 0.7: k = 5. Line 1: accepted 1, draft 5, emitted 1 (rate 1 / 5 = 0.200, efficiency 1 / (1 · 6) = 0.167);
    # line 2: 1, 15, 3 (1 / 15 = 0.067, 3 / (3 · 6) = 0.167)
    assert (round(1 / 5, 3), round(1 / 6, 3), round(1 / 15, 3), round(3 / 18, 3)) == (0.2, 0.167, 0.067, 0.167)
    (first, row), _ = imported(tmp_path, "v0_0.7.log")
    # line 1, from the engine's start: 5 drafted in 5 / 5 = 1 step, which emitted 1 token: prefix 1 − 1 = 0
    assert pick(first, *COUNTS) == (None, t("2025-02-06T03:05:53"), 1, 5, 0, None)
    # 10 drafts over 2 steps emitted 2 tokens: prefix 2 − 2 = 0 (V0's own count stayed at 1: it counts a
    # matching position after a rejection too)
    assert pick(row, *COUNTS) == (t("2025-02-06T03:05:53"), t("2025-02-06T03:18:09"), 2, 10, 0, None)


def test_v1_0_8_counts_without_a_mean_length(tmp_path):
    rows, stdout = imported(tmp_path, "v1_0.8.log")
    # `Draft acceptance rate: nan%, Accepted: 0 tokens, Drafted: 0 tokens`, twice: nothing drafted,
    # num_drafts unknown; each after its Engine 000 line (Running 0, Waiting 0, 0.0 tokens/s, KV 0.1 %).
    # The tick at 18:03:41 printed 0.0 prompt and 0.0 generation throughput and drafted nothing: after
    # such a tick vLLM may print no line for idle ticks, so the second interval's start is unknown.
    assert [pick(r, *COUNTS) for r in rows] == [
        (None, t("2025-04-02T18:03:41"), None, 0, 0, None),
        (None, t("2025-04-02T18:03:51"), None, 0, 0, None)]
    assert [pick(r, *LOAD) for r in rows] == [(0, 0, 0.0, pytest.approx(0.001))] * 2
    assert {r["series"] for r in rows} == {"Engine 000"}
    assert "layouts read: 0.8 (2)" in stdout


def test_v1_0_9_mean_length_and_positions(tmp_path):
    # Arithmetic of the lines: 150 / 387 = 38.8 %, 725 / 1488 = 48.7 %; 1 + Σ rates = 2.164 and 2.462
    assert (round(100 * 150 / 387, 1), round(100 * 725 / 1488, 1)) == (38.8, 48.7)
    assert (round(1 + 0.543 + 0.357 + 0.264, 2), round(1 + 0.615 + 0.464 + 0.383, 2)) == (2.16, 2.46)
    rows, stdout = imported(tmp_path, "v1_0.9.log")
    # k = 3 rates: 387 / 3 = 129 steps, and 1 + 150 / 129 = 2.163 prints 2.16: exact under a fixed k.
    # 0.543·129 = 70.05, 0.357·129 = 46.05, 0.264·129 = 34.06.
    # 1488 / 3 = 496, 1 + 725 / 496 = 2.462 prints 2.46 (round(725 / 1.46) = 497 would too: 496 is exact);
    # 0.615·496 = 305.04, 0.464·496 = 230.14, 0.383·496 = 189.97
    assert [pick(r, *COUNTS) for r in rows] == [
        (None, t("2025-06-06T14:20:34"), 129, 387, 150, [70, 46, 34]),
        (t("2025-06-06T14:20:34"), t("2025-06-06T14:20:44"), 496, 1488, 725, [305, 230, 190])]
    assert [pick(r, *LOAD) for r in rows] == [(337, 633, 267.6, pytest.approx(0.095)),
                                             (629, 226, 826.0, pytest.approx(0.163))]
    assert [r["reported_accept_length"] for r in rows] == [2.16, 2.46]
    assert "num_drafts = Drafted / k on 2 intervals" in stdout


def test_2025_09_layout_with_throughputs(tmp_path):
    (row,), stdout = imported(tmp_path, "v1_2025-09.log")
    # 295 / 5 = 59, 1 + 262 / 59 = 5.441 prints 5.44; 0.983·59 = 58.0, 0.949·59 = 55.99, 0.915·59 = 53.99,
    # 0.881·59 = 51.98, 0.712·59 = 42.01
    assert pick(row, *COUNTS) == (None, t("2025-09-09T11:51:35"), 59, 295, 262, [58, 56, 54, 52, 42])
    assert row["series"] == "(APIServer pid=2236552)"
    assert "layouts read: 2025-09 (1)" in stdout


def test_newest_layout(tmp_path):
    rows, stdout = imported(tmp_path, "v1_newest.log")
    # 1572 / 6 = 262, 1 + 489 / 262 = 2.866 prints 2.87; 0.740·262 = 193.9, 0.473·262 = 123.9, 0.309·262 = 81.0,
    # 0.187·262 = 49.0, 0.099·262 = 25.9, 0.057·262 = 14.9.
    # 1590 / 6 = 265, 1 + 455 / 265 = 2.717 prints 2.72; 0.728·265 = 192.9, 0.445·265 = 117.9, 0.275·265 = 72.9,
    # 0.151·265 = 40.0, 0.075·265 = 19.9, 0.042·265 = 11.1
    assert [pick(r, *COUNTS) for r in rows] == [
        (None, t("2025-05-08T16:25:09"), 262, 1572, 489, [194, 124, 81, 49, 26, 15]),
        (t("2025-05-08T16:25:09"), t("2025-05-08T16:25:19"), 265, 1590, 455, [193, 118, 73, 40, 20, 11])]
    assert [pick(r, *LOAD) for r in rows] == [(1, 0, 74.7, pytest.approx(0.074)), (1, 0, 72.0, pytest.approx(0.078))]
    assert {r["series"] for r in rows} == {"(APIServer pid=13026) Engine 000"}
    assert "layouts read: newest (2)" in stdout


def test_data_parallel_engines_never_chain(tmp_path):
    rows, stdout = imported(tmp_path, "dp_two_engines.log")
    # Line 1 has no Engine line before it, and the process logs for two engines: its own series.
    # k = 1: 86 steps (1 + 70 / 86 = 1.814 prints 1.81), 0.814·86 = 70.0.
    # Line 3 follows `Engine 000`: 258 steps (1 + 192 / 258 = 1.744), 0.744·258 = 191.95; it does not
    # start at line 1, which may be another engine's.
    assert [(r["series"], *pick(r, *COUNTS)) for r in rows] == [
        ("(APIServer pid=33183)", None, t("2025-05-31T15:59:44"), 86, 86, 70, [70]),
        ("(APIServer pid=33183) Engine 000", None, t("2025-05-31T15:59:54"), 258, 258, 192, [192])]
    assert pick(rows[1], *LOAD) == (3, 0, 45.0, pytest.approx(0.05))
    assert "2 series (engines or processes)" in stdout


def test_docker_compose_prefix_and_a_single_engine(tmp_path):
    rows, _ = imported(tmp_path, "docker_compose.log")
    # the process logs for Engine 000 only, so the first spec line (no load line before it) is Engine 000's too.
    # 434 / 2 = 217 (1 + 419 / 217 = 2.931), 0.982·217 = 213.1, 0.949·217 = 205.9;
    # 104 / 2 = 52 (1 + 69 / 52 = 2.327), 0.808·52 = 42.0, 0.519·52 = 26.99
    assert [(r["series"], *pick(r, *COUNTS)) for r in rows] == [
        ("vllm_gb10_server | (APIServer pid=1) Engine 000", None, t("2025-04-29T11:30:43"), 217, 434, 419,
         [213, 206]),
        ("vllm_gb10_server | (APIServer pid=1) Engine 000", t("2025-04-29T11:30:43"), t("2025-04-29T11:30:53"),
         52, 104, 69, [42, 27])]
    assert pick(rows[1], *LOAD) == (0, 0, 12.1, 0.0)


def test_vllm_ascend_prints_the_same_lines(tmp_path):
    rows, stdout = imported(tmp_path, "vllm_ascend.log")
    # 15360 / 5 = 3072 (1 + 666 / 3072 = 1.217), 15895 / 5 = 3179 (1.232), 14040 / 5 = 2808 (1.274)
    assert [pick(r, "num_drafts", "num_draft_tokens", "num_accepted_tokens") for r in rows] == [
        (3072, 15360, 666), (3179, 15895, 736), (2808, 14040, 768)]
    assert "layouts read: newest (3)" in stdout


def test_april_2025_layout_parses_and_a_line_without_time_is_exit_2(tmp_path):
    line = (LOGS / "v1_2025-04.log").read_text().splitlines()[0]
    assert parse_metrics(line) == {"layout": "v1-2025-04", "cumulative": False, "accepted": 66, "drafted": 66,
                                   "emitted": None, "k": None, "mean": None, "rates": [],
                                   "printed": {"rate": (1.0, 3)}}      # 66 / 66 = 1.000, as printed
    # the only public sample of this layout has no log prefix: no time, so nothing imports
    out = tmp_path / "traces"
    result = CliRunner().invoke(main, ["import", "vllm-log", str(LOGS / "v1_2025-04.log"), "--deployment", "d",
                                       "--out", str(out)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {LOGS / 'v1_2025-04.log'}: nothing to import: the first metrics "
                                    f"line that did not import is {LOGS / 'v1_2025-04.log'}:1: no date and time in "
                                    "the line (pass --start TIME to anchor lines without one) "
                                    "(layouts: `specan import vllm-log --list-layouts`)\n")
    assert not out.exists()                 # nothing half-written
    # … and with --start it is one interval ending then: 66 accepted of 66 drafted, no mean so no step count
    result = CliRunner().invoke(main, ["import", "vllm-log", str(LOGS / "v1_2025-04.log"), "--deployment", "d",
                                       "--start", "2025-04-01T09:00:00", "--out", str(out)])
    assert result.exit_code == 0, result.output
    (row,) = [r for p in (out / "intervals").glob("*.parquet") for r in pq.read_table(p, partitioning=None).to_pylist()]
    assert pick(row, *COUNTS) == (None, t("2025-04-01T09:00:00"), None, 66, 66, None)
    assert "1 line without a date and time anchored at --start" in result.stdout


def test_start_anchors_lines_without_a_time_one_logging_interval_apart(tmp_path):
    # v1_newest.log's load and spec lines (club-3090#105) as the message alone, without vLLM's prefix: two ticks,
    # anchored at --start and 10 s (V1's default logging interval) on, the second chained to the first
    real = (LOGS / "v1_newest.log").read_text().splitlines()[1:]
    bare = [line[line.index("] ") + 2:] for line in real]
    log = tmp_path / "bare.log"
    log.write_text("\n".join(bare) + "\n")
    out = tmp_path / "traces"
    result = CliRunner().invoke(main, ["import", "vllm-log", str(log), "--deployment", "d",
                                       "--start", "2026-05-08T16:00:00", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = sorted((r for p in (out / "intervals").glob("*.parquet")
                   for r in pq.read_table(p, partitioning=None).to_pylist()), key=lambda r: r["end_time"])
    # 1572 / 6 = 262 and 1590 / 6 = 265 steps (test_newest_layout); the loads 74.7 and 72.0 tokens/s
    assert [pick(r, "start_time", "end_time", "num_drafts", "num_accepted_tokens", "generation_tokens_per_s")
            for r in rows] == [(None, t("2026-05-08T16:00:00"), 262, 489, 74.7),
                               (t("2026-05-08T16:00:00"), t("2026-05-08T16:00:10"), 265, 455, 72.0)]
    assert "4 lines without a date and time anchored at --start" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["vllm-log", "--start", "yesterday"], "--start: 'yesterday' is not an ISO-8601 time"),
    (["sglang-log", "--start", "2026-01-01T00:00:00"], "--start applies to llamacpp-log and vllm-log only"),
])
def test_start_refused(tmp_path, args, message):
    result = CliRunner().invoke(main, ["import", args[0], str(LOGS / "v1_2025-04.log"), *args[1:],
                                       "--deployment", "d", "--out", str(tmp_path / "traces")])
    assert result.exit_code == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_log_shipper_timestamps_and_colours_do_not_split_a_series(tmp_path):
    # The two real lines of v1_newest.log as a Kubernetes log shipper stores them (an RFC 3339 time and
    # the stream first), one of them with vLLM's ANSI colours: one series, chained.
    real = [line for line in (LOGS / "v1_newest.log").read_text().splitlines() if "SpecDecoding" in line]
    shipped = [f"2025-05-08T16:25:09.412345678Z stdout F {real[0]}",
               f"2025-05-08T16:25:19.398765432Z stdout F \x1b[1;36m{real[1][:22]}\x1b[0;0m{real[1][22:]}"]
    log = tmp_path / "k8s.log"
    log.write_text("\n".join(shipped) + "\n\n")
    out = tmp_path / "traces"
    result = CliRunner().invoke(main, ["import", "vllm-log", str(log), "--deployment", "d", "--year", "2025",
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = sorted((r for p in (out / "intervals").glob("*.parquet")
                   for r in pq.read_table(p, partitioning=None).to_pylist()), key=lambda r: r["end_time"])
    # times from vLLM's own prefix; the shipper's time is only a fallback
    assert [(r["series"], r["start_time"], r["end_time"]) for r in rows] == [
        ("stdout F (APIServer pid=13026)", None, t("2025-05-08T16:25:09")),
        ("stdout F (APIServer pid=13026)", t("2025-05-08T16:25:09"), t("2025-05-08T16:25:19"))]
    assert [r["num_drafts"] for r in rows] == [262, 265]


def test_the_shippers_time_when_vllm_printed_none(tmp_path):
    line = [x for x in (LOGS / "v1_newest.log").read_text().splitlines() if "SpecDecoding" in x][0]
    message = line[line.index("SpecDecoding"):]           # the message alone, as some collectors keep it
    log = tmp_path / "bare.log"
    log.write_text(f"2025-05-08T16:25:09+02:00 {message}\n2025-05-08T16:25:19+02:00 {message}\n")
    out = tmp_path / "traces"
    assert CliRunner().invoke(main, ["import", "vllm-log", str(log), "--deployment", "d",
                                     "--out", str(out)]).exit_code == 0
    ends = sorted(r["end_time"] for p in (out / "intervals").glob("*.parquet")
                  for r in pq.read_table(p, partitioning=None).to_pylist())
    assert ends == [t("2025-05-08T14:25:09"), t("2025-05-08T14:25:19")]      # +02:00 read as such, stored UTC


@pytest.mark.parametrize("name, expected", [
    # vLLM 0.6.3: 13311 drafted / k 3 = 4437 steps, which emitted 10616 tokens: prefix 10616 − 4437 = 6179.
    # Its own fields agree: rate 8547 / 13311 = 0.6421 → 0.642, efficiency 10616 / (4437 · 4) = 0.5981 → 0.598
    ("v0_0.6.log", (None, t("2025-10-16T19:05:47"), 4437, 13311, 6179, None)),
    # vLLM 0.9.1, V0 engine: 12564 / 4 = 3141 steps, 8347 emitted: prefix 8347 − 3141 = 5206.
    # rate 8485 / 12564 = 0.6753 → 0.675, efficiency 8347 / (3141 · 5) = 0.5315 → 0.531
    ("v0_0.9_v0engine.log", (None, t("2025-08-05T11:34:35"), 3141, 12564, 5206, None)),
])
def test_a_one_line_v0_paste_is_an_interval_from_the_engines_start(tmp_path, name, expected):
    assert (round(8547 / 13311, 3), round(10616 / (4437 * 4), 3)) == (0.642, 0.598)
    assert (round(8485 / 12564, 3), round(8347 / (3141 * 5), 3)) == (0.675, 0.531)
    (row,), stdout = imported(tmp_path, name)
    assert pick(row, *COUNTS) == expected
    assert row.get("generation_tokens_per_s") is None    # the load line's throughput is its tick's, not since start
    assert "1 interval from the engine's start" in stdout and "disagree" not in stdout


def test_zero_acceptance_on_vllm_ascend_still_counts_drafts_and_positions(tmp_path):
    # vllm-ascend#13665 (grep output): each line Drafted 495, Accepted 0, 5 per-position rates of 0.000,
    # mean 1.00: 495 / 5 = 99 steps (1 + 0 / 99 = 1.00), every position accepted 0 times
    rows, stdout = imported(tmp_path, "vllm_ascend_grep.log")
    assert [pick(r, "end_time", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position",
                 "reported_accept_length") for r in rows] == [
        (t("2025-08-05T20:20:43"), 99, 495, 0, [0, 0, 0, 0, 0], 1.0),
        (t("2025-08-05T20:35:43"), 99, 495, 0, [0, 0, 0, 0, 0], 1.0),
        (t("2025-08-05T20:38:23"), 99, 495, 0, [0, 0, 0, 0, 0], 1.0)]
    assert "num_drafts = Drafted / k on 3 intervals" in stdout and "num_drafts unknown" not in stdout


def test_a_line_whose_printed_rates_contradict_its_counts_is_named(tmp_path):
    # the real line of vllm_ascend.log:1 (Accepted 666, Drafted 15360, 15360 / 5 = 3072 steps) with its
    # Avg Draft acceptance rate changed from 4.3 % (666 / 15360 = 4.34 %) to 43.0 %, and then with its
    # per-position rates changed to sum 0.316 instead of 0.216 (666 / 3072 = 0.2168: 0.216 ± 5 · 0.0005 holds)
    real = (LOGS / "vllm_ascend.log").read_text().splitlines()[0]
    assert round(100 * 666 / 15360, 1) == 4.3 and abs(0.207 + 0.009 - 666 / 3072) <= 0.0025
    log = tmp_path / "edited.log"
    log.write_text(real.replace("4.3%", "43.0%") + "\n"
                   + real.replace("09:03:54", "09:04:04").replace("0.207, 0.009", "0.307, 0.009") + "\n")
    out = tmp_path / "traces"
    result = CliRunner().invoke(main, ["import", "vllm-log", str(log), "--deployment", "d", "--year", "2025",
                                       "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (f"1 metrics line whose printed avg_rate disagrees with its Accepted and Drafted counts beyond the "
            f"printed rounding (imported with the counts as printed), first at {log}:1") in result.stdout
    assert f"1 metrics line whose printed per-position rates disagrees with its Accepted and Drafted counts " \
           f"beyond the printed rounding (imported with the counts as printed), first at {log}:2" in result.stdout
