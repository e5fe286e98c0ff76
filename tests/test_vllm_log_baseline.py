"""`specan import vllm-log` on the logs of deployments that do not speculate, and the load lines of
speculative logs (docs/importers.md, "Baseline logs" and "Logging ticks"). Real lines only
(tests/fixtures/vllm_logs/, each file's source in SOURCES.md); every value counted by hand."""

from __future__ import annotations

import re

import pytest

from imported import rows, run, t
from test_vllm_log_layouts import LOGS

LOAD = ("start_time", "end_time", "running_requests", "waiting_requests", "generation_tokens_per_s", "kv_cache_usage")


def imported(tmp_path, *names: str, extra: tuple = ()) -> tuple[list[dict], list[str], str]:
    out = tmp_path / "traces"
    result = run("import", "vllm-log", *(LOGS / n for n in names), "--deployment", "b", "--year", "2025",
                 "--out", out, *extra)
    assert result.exit_code == 0, result.output
    got = sorted(rows(out, "intervals"), key=lambda r: (r.get("series") or "", r["end_time"]))
    return got, [r["note"] for r in rows(out, "import_notes")], result.stdout


def pick(row: dict) -> tuple:
    return tuple(row.get(n) for n in LOAD)


def test_v0_load_lines_of_a_plain_deployment(tmp_path):
    # vllm#12314: six V0 lines 5 s apart, `Pending:` for the waiting requests, 1 running, every one busy
    # (41.5-41.8 tokens/s), so each line starts at the one before; the first has no start.
    got, notes, stdout = imported(tmp_path, "baseline_v0_pending.log")
    ends = ["18:27:20", "18:27:25", "18:27:30", "18:27:35", "18:27:40", "18:27:45"]
    throughput = [41.7, 41.7, 41.5, 41.8, 41.8, 41.7]
    kv = [0.020, 0.021, 0.021, 0.022, 0.022, 0.023]
    assert [pick(r) for r in got] == [
        (t(f"2025-01-22T{a}") if a else None, t(f"2025-01-22T{b}"), 1, 0, g, pytest.approx(k))
        for a, b, g, k in zip([None] + ends[:-1], ends, throughput, kv)]
    assert {r.get("series") for r in got} == {None}          # no process prefix, no engine: no column
    assert all(r["num_draft_tokens"] is None and r["num_drafts"] is None for r in got)
    assert "reported_accept_length" not in got[0]            # all null: the column is left out
    assert rows(tmp_path / "traces", "deployments") == [{"deployment_id": "b", "model": "unknown", "method": "none",
                                                         "num_speculative_tokens": 0}]
    assert "layouts read: load V0 (`Pending:`) (6)" in notes
    assert any(n.startswith("no speculative-decoding line: a deployment that does not speculate") for n in notes)
    assert "1 interval without a start time" in " ".join(notes)
    assert re.search(r"intervals +6 rows", stdout)


def test_files_never_chain_and_a_non_log_line_is_skipped(tmp_path):
    # vllm#12314's two excerpts, each its own file: the second's first load line (18:25:09, after an
    # `Added request` line) does not start at the first file's last line. 6 + 5 intervals.
    got, _, stdout = imported(tmp_path, "baseline_v0_pending.log", "baseline_v0_pending_two_running.log")
    by_end = {r["end_time"]: r for r in got}
    assert len(got) == 11
    assert by_end[t("2025-01-22T18:25:09")]["start_time"] is None
    assert pick(by_end[t("2025-01-22T18:25:14")]) == (t("2025-01-22T18:25:09"), t("2025-01-22T18:25:14"), 2, 0,
                                                      82.5, pytest.approx(0.075))
    assert "        1  not a speculative-decoding metrics line" in stdout


def test_v1_idle_tail_keeps_its_lines_and_their_load(tmp_path):
    # vllm#26349: Engine 000 at 1 running (149.6, 148.3 tokens/s), then 0 running with 126.6 and 13.9
    # tokens/s (requests finishing, a short prefill: 137.4 prompt tokens/s), then 0.0 and 0.0. Every
    # line before the last is busy, so all chain; the uvicorn line between is skipped.
    got, notes, _ = imported(tmp_path, "baseline_v1_idle_tail.log")
    ends = ["11:26:41", "11:26:51", "11:27:01", "11:27:11", "11:27:21"]
    assert [pick(r) for r in got] == [
        (t(f"2025-10-06T{a}") if a else None, t(f"2025-10-06T{b}"), running, 0, g, pytest.approx(k))
        for a, b, running, g, k in zip([None] + ends[:-1], ends, [1, 1, 0, 0, 0], [149.6, 148.3, 126.6, 13.9, 0.0],
                                       [0.334, 0.363, 0.0, 0.0, 0.0])]
    assert {r["series"] for r in got} == {"(APIServer pid=19189) Engine 000"}
    assert "layouts read: load V1 (`Engine 00N:`) (5)" in notes


def test_after_an_idle_tick_the_start_is_unknown(tmp_path):
    # The two Engine 000 lines of v1_0.8.log alone (vllm#15958), as a plain deployment's log would hold
    # them: both print 0.0 prompt and 0.0 generation throughput. After such a tick vLLM prints nothing for
    # the idle ticks that follow, so the second line's window is unknown too.
    lines = [x for x in (LOGS / "v1_0.8.log").read_text().splitlines() if "Engine 000" in x]
    log = tmp_path / "plain.log"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "traces"
    assert run("import", "vllm-log", log, "--deployment", "b", "--year", "2025", "--out", out).exit_code == 0
    got = sorted(rows(out, "intervals"), key=lambda r: r["end_time"])
    assert [(r["start_time"], r["end_time"]) for r in got] == [(None, t("2025-04-02T18:03:41")),
                                                               (None, t("2025-04-02T18:03:51"))]
    assert "2 intervals without a start time" in " ".join(r["note"] for r in rows(out, "import_notes"))


def test_a_single_load_line_and_a_method_given(tmp_path):
    # vllm#19680: one V1 line without a process prefix; --method keeps what the user says
    got, _, _ = imported(tmp_path, "baseline_v1_0.9.log", extra=("--method", "none", "--model", "m"))
    assert [pick(r) for r in got] == [(None, t("2025-06-16T10:03:14"), 10, 4, 29.2, pytest.approx(0.579))]
    assert got[0]["series"] == "Engine 000"
    assert rows(tmp_path / "traces", "deployments")[0]["model"] == "m"


def test_a_speculative_log_keeps_its_spec_lines_and_counts_its_lone_load_lines(tmp_path):
    # vllm#43295, experiment 2 (MTP, k = 2), three excerpts of one log, one file each:
    #   10:25:23 load + spec, 10:25:33 load + spec, 10:25:43 load (its spec line is not in the excerpt)
    #   10:27:03 spec (its load line is not in the excerpt), 10:27:13 load + spec, 10:27:23 load
    #   10:30:33 spec, 10:30:43 load + spec, 10:30:53 load
    # Six intervals, one per spec line; the three load lines without their spec line are no intervals
    # of their own. Each file's second interval starts at the first one's tick (busy: 1137.0 tokens/s,
    # or a spec line that drafted 7088 and 7214 tokens).
    got, notes, stdout = imported(tmp_path, "mtp_newest_1025.log", "mtp_newest_1027.log", "mtp_newest_1030.log")
    assert [pick(r) for r in got] == [
        (None, t("2025-05-19T10:25:23"), 9, 82, 1137.0, pytest.approx(0.965)),
        (t("2025-05-19T10:25:23"), t("2025-05-19T10:25:33"), 9, 81, 972.4, pytest.approx(0.982)),
        (None, t("2025-05-19T10:27:03"), None, None, None, None),
        (t("2025-05-19T10:27:03"), t("2025-05-19T10:27:13"), 9, 56, 929.6, pytest.approx(0.942)),
        (None, t("2025-05-19T10:30:33"), None, None, None, None),
        (t("2025-05-19T10:30:33"), t("2025-05-19T10:30:43"), 8, 7, 1004.4, pytest.approx(0.825))]
    # k = 2: 8802 / 2 = 4401 steps, 1 + 6973 / 4401 = 2.584 prints 2.58; 7300 / 2 = 3650, 1 + 6077 / 3650 =
    # 2.665 → 2.66; 7088 / 2 = 3544 → 2.511; 7214 / 2 = 3607 → 2.578 and 2.534; 7254 / 2 = 3627 → 2.770
    assert [(r["num_drafts"], r["num_draft_tokens"], r["num_accepted_tokens"]) for r in got] == [
        (4401, 8802, 6973), (3650, 7300, 6077), (3544, 7088, 5355), (3607, 7214, 5692), (3607, 7214, 5533),
        (3627, 7254, 6418)]
    assert "        3  load line with no spec line at its tick" in stdout
    assert any(n.startswith("3 lines skipped (load line with no spec line at its tick") and
               f"{LOGS / 'mtp_newest_1025.log'}:5" in n for n in notes)
    deployment = rows(tmp_path / "traces", "deployments")[0]
    assert (deployment["method"], deployment["num_speculative_tokens"]) == ("unknown", 2)


def test_a_file_with_neither_kind_of_line_exits_2(tmp_path):
    log = tmp_path / "other.log"
    log.write_text((LOGS / "baseline_v1_idle_tail.log").read_text().splitlines()[3] + "\n")   # a uvicorn line
    out = tmp_path / "traces"
    result = run("import", "vllm-log", log, "--deployment", "b", "--out", out)
    assert result.exit_code == 2
    assert result.stderr.startswith(
        f"Error: {log}: nothing to import: no line looks like vLLM's speculative-decoding metrics or its load "
        "line (`Avg generation throughput: … Running: N reqs`) (layouts: `specan import vllm-log --list-layouts`)\n")
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


def test_load_lines_without_a_time_exit_2_naming_the_first(tmp_path):
    # vllm#15902's example load line has no logger prefix: no time, so no interval
    line = (LOGS / "v1_0.8_pr15902.log").read_text().splitlines()[1]
    log = tmp_path / "bare.log"
    log.write_text(line + "\n")
    result = run("import", "vllm-log", log, "--deployment", "b", "--out", tmp_path / "traces")
    assert result.exit_code == 2
    assert (f"nothing to import: no speculative-decoding metrics line, and the load lines have no date and time "
            f"(first at {log}:1; pass --start TIME to anchor lines without one)") in result.stderr
    # anchored at --start: a baseline interval of its own, the first of its series (no start): 0 running, 10.0 tokens/s
    out = tmp_path / "anchored"
    result = run("import", "vllm-log", log, "--deployment", "b", "--start", "2025-04-01T12:00:00", "--out", out)
    assert result.exit_code == 0, result.output
    assert [(r["start_time"], r["end_time"], r["running_requests"], r["generation_tokens_per_s"])
            for r in rows(out, "intervals")] == [(None, t("2025-04-01T12:00:00"), 0, 10.0)]


def test_aggregated_engines_load_lines(tmp_path):
    # The two `1 Engines Aggregated:` lines of vllm_ascend_engines_aggregated.log alone (vllm-ascend#9803),
    # from two API-server processes: one series each, each its first line (no start), 8 running.
    lines = [x for x in (LOGS / "vllm_ascend_engines_aggregated.log").read_text().splitlines()
             if "Engines Aggregated" in x]
    log = tmp_path / "aggregated.log"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "traces"
    assert run("import", "vllm-log", log, "--deployment", "b", "--year", "2025", "--out", out).exit_code == 0
    got = sorted(rows(out, "intervals"), key=lambda r: r["series"])
    assert [(r["series"], *pick(r)) for r in got] == [
        ("(APIServer pid=2523785)", None, t("2025-05-30T15:21:33"), 8, 0, 60.2, pytest.approx(0.326)),
        ("(APIServer pid=2523786)", None, t("2025-05-30T15:21:33"), 8, 0, 68.2, pytest.approx(0.329))]
    assert "layouts read: load `N Engines Aggregated:` (2)" in [r["note"] for r in rows(out, "import_notes")]
