"""`specan import vllm-log` on vLLM's per-iteration lines (`--enable-logging-iteration-details`) → steps.

The real lines are tests/fixtures/vllm_logs/iterations_*.log (vllm#31193 and vllm#34860, SOURCES.md); the
constructed pair constructed_iterations_{plain,spec}.log keeps those layouts and edits their numbers. Every
expected value is worked out by hand in the comments: start = the line's time − its elapsed time (vLLM logs
the line when the iteration ends), batch size = generation requests, prefill = context tokens, KV usage =
the printed percentage / 100, step_id = the logged second (epoch) × 1,000,000 + the line's place in it."""

from __future__ import annotations

import datetime as dt

import pytest

from analyzer.ingest.importers import sniff
from analyzer.ingest.importers.vllm_iterations import engine_of, parse_iteration, spread
from imported import rows, run, t
from test_vllm_log_layouts import LOGS

MS = dt.timedelta(milliseconds=1)
STEP = ("step_id", "start_time", "duration_ms", "batch_size", "num_prefill_tokens", "kv_usage")
COUNTS = ("num_draft_tokens", "num_accepted_tokens", "num_committed_tokens", "counts_from")


def imported(tmp_path, *files, extra: tuple = (), year: str = "2025") -> tuple[list[dict], list[str], str]:
    out = tmp_path / "traces"
    result = run("import", "vllm-log", *files, "--deployment", "d", "--year", year, "--out", out, *extra)
    assert result.exit_code == 0, result.output
    steps = sorted(rows(out, "steps"), key=lambda r: r["step_id"])
    return steps, [r["note"] for r in rows(out, "import_notes")], result.stdout


def second(text: str) -> int:
    """The step_id of the first step logged in that second: epoch seconds × 1,000,000."""
    return int(t(text).timestamp()) * 1_000_000


def pick(row: dict, names: tuple) -> tuple:
    return tuple(row.get(n) for n in names)


def test_layout_without_kv_fields_pr31193(tmp_path):
    # vllm#31193's example: three lines of EngineCore_DP0 at 12-22 21:44:40, each 0 context requests and
    # tokens, 20 generation requests and 20 generation tokens; elapsed 10.99, 10.95 and 10.79 ms.
    steps, notes, _ = imported(tmp_path, LOGS / "iterations_pr31193.log")
    end = t("2025-12-22T21:44:40")
    # start = 21:44:40 − 10.99 ms = 21:44:39.989010; − 10.95 ms = 21:44:39.989050; − 10.79 ms = 21:44:39.989210
    assert [pick(r, STEP) for r in steps] == [
        (second("2025-12-22T21:44:40") + 0, end - 10.99 * MS, 10.99, 20, 0, None),
        (second("2025-12-22T21:44:40") + 1, end - 10.95 * MS, 10.95, 20, 0, None),
        (second("2025-12-22T21:44:40") + 2, end - 10.79 * MS, 10.79, 20, 0, None)]
    assert steps[0]["start_time"] == t("2025-12-22T21:44:39.989010")
    assert "kv_usage" not in steps[0]                       # never printed: the column is left out
    # no spec-decode line: a plain deployment, one committed token per generation request
    assert [pick(r, COUNTS) for r in steps] == [(0, 0, 20, "iteration")] * 3
    deployments = rows(tmp_path / "traces", "deployments")
    assert [(r["method"], r["num_speculative_tokens"]) for r in deployments] == [("none", 0)]
    assert not rows(tmp_path / "traces", "intervals")
    assert any("start_time = the line's time − its iteration elapsed time" in n for n in notes)
    assert any("one-second resolution" in n and "Iteration(N) counter" in n for n in notes)


def test_layout_with_kv_blocks_pr34860(tmp_path):
    # vllm#34860's test output: Iteration(188) and (189) at 02-18 16:21:20, 50 generation requests and
    # tokens each, elapsed 10.25 and 0.72 ms, `kv cache: 5.1% (3500/68959 blocks, 56000 tokens)`.
    # The line's own arithmetic: 3500 / 68959 = 5.075 % → 5.1 %, and 56000 / 3500 = 16 tokens per block.
    assert round(3500 / 68959 * 100, 1) == 5.1 and 56000 / 3500 == 16
    steps, notes, _ = imported(tmp_path, LOGS / "iterations_kv_pr34860.log", year="2026")
    end = t("2026-02-18T16:21:20")
    # start = 16:21:20 − 10.25 ms = 16:21:19.989750 and 16:21:20 − 0.72 ms = 16:21:19.999280; kv 5.1 / 100
    assert [pick(r, STEP) for r in steps] == [
        (second("2026-02-18T16:21:20"), t("2026-02-18T16:21:19.989750"), 10.25, 50, 0, pytest.approx(0.051)),
        (second("2026-02-18T16:21:20") + 1, end - 0.72 * MS, 0.72, 50, 0, pytest.approx(0.051))]
    assert [pick(r, COUNTS) for r in steps] == [(0, 0, 50, "iteration")] * 2
    assert any("iteration + kv cache blocks (2)" in n for n in notes)
    assert not any("kv cache percentage is not" in n for n in notes)      # 5.1 % = 3500 / 68959 rounded


def test_parse_reads_every_field_by_its_label():
    line = (LOGS / "iterations_kv_pr34860.log").read_text().splitlines()[0]
    fields = parse_iteration(line[line.index("Iteration("):])
    assert {k: fields[k] for k in ("counter", "ctx_requests", "ctx_tokens", "gen_requests", "gen_tokens",
                                   "elapsed_ms", "dummy")} == {
        "counter": 188, "ctx_requests": 0, "ctx_tokens": 0, "gen_requests": 50, "gen_tokens": 50,
        "elapsed_ms": 10.25, "dummy": False}
    assert fields["kv_usage"] == pytest.approx(0.051)
    # the dummy marker that core.py appends after " ms" (constructed_iterations_plain.log, line 3)
    dummy = (LOGS / "constructed_iterations_plain.log").read_text().splitlines()[2]
    assert parse_iteration(dummy[dummy.index("Iteration("):])["dummy"] is True


@pytest.mark.parametrize("prefix", ["vllm_server  | ", "2026-02-18T16:21:20.500000000Z ", "\x1b[32m"])
def test_shipper_and_compose_prefixes_keep_vllm_time(tmp_path, prefix):
    # the same real lines behind a docker compose service name, a `docker logs -t` / k8s RFC 3339 time and an
    # ANSI colour: vLLM's own `INFO 02-18 16:21:20` still gives the time (the shipper's only when it is missing)
    text = "".join(prefix + line + "\n" for line in (LOGS / "iterations_kv_pr34860.log").read_text().splitlines())
    path = tmp_path / "prefixed.log"
    path.write_text(text)
    steps, _, _ = imported(tmp_path, path, year="2026")
    assert [r["start_time"] for r in steps] == [t("2026-02-18T16:21:19.989750"), t("2026-02-18T16:21:19.999280")]


def test_shipper_time_when_vllm_prefix_is_missing(tmp_path):
    # message only (as pasted in a PR) behind a shipper's RFC 3339 time: that time is the line's end,
    # 16:21:20.5 − 10.25 ms = 16:21:20.489750
    lines = (LOGS / "iterations_kv_pr34860.log").read_text().splitlines()
    path = tmp_path / "shipped.log"
    path.write_text("".join("2026-02-18T16:21:20.500000Z " + line[line.index("Iteration("):] + "\n"
                            for line in lines))
    steps, _, _ = imported(tmp_path, path)
    assert [r["start_time"] for r in steps] == [t("2026-02-18T16:21:20.489750"), t("2026-02-18T16:21:20.499280")]


def test_lines_without_a_time_need_start(tmp_path):
    lines = (LOGS / "iterations_pr31193.log").read_text().splitlines()
    path = tmp_path / "bare.log"
    path.write_text("".join(line[line.index("Iteration("):] + "\n" for line in lines))
    result = run("import", "vllm-log", path, "--deployment", "d", "--out", tmp_path / "a")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "nothing to import" in result.output and "--start" in result.output
    assert "3 iteration lines and none kept" in result.output and "bare.log:1" in result.output
    # one line: the layouts are behind --list-layouts
    assert result.output.rstrip().endswith("(layouts: `specan import vllm-log --list-layouts`)")
    assert len(result.output.strip().splitlines()) == 1
    # with --start: back to back from it, each ending its elapsed time after the one before:
    # ends 10.99, 21.94, 32.73 ms after 12:00:00; starts 0, 10.99, 21.94 ms
    steps, notes, _ = imported(tmp_path, path, extra=("--start", "2026-01-05T12:00:00"))
    start = t("2026-01-05T12:00:00")
    assert [r["start_time"] for r in steps] == [start, start + 10.99 * MS, start + 21.94 * MS]
    assert [r["step_id"] for r in steps] == [second("2026-01-05T12:00:00") + i for i in range(3)]
    assert any("anchored at --start" in n and "assumed" in n for n in notes)


def test_malformed_iteration_line_is_skipped_with_a_reason(tmp_path):
    # the marker is there, a number is not: counted as skipped, never a traceback; the other lines import
    lines = (LOGS / "iterations_pr31193.log").read_text().splitlines()
    lines[1] = lines[1].replace("20 generation requests", "x generation requests")
    lines[2] = lines[2].replace("10.79 ms", "nan ms")
    path = tmp_path / "bad.log"
    path.write_text("\n".join(lines) + "\n")
    steps, notes, stdout = imported(tmp_path, path)
    assert [r["duration_ms"] for r in steps] == [10.99]
    assert "2  iteration line whose numbers do not parse (first at" in stdout and "bad.log:2" in stdout
    assert any("2 records skipped: iteration line whose numbers do not parse" in n for n in notes)


def test_constructed_plain_log_counts_one_token_per_request(tmp_path):
    # constructed_iterations_plain.log (layout of vllm#31193, numbers edited): 515 is real (20 requests,
    # 10.99 ms); 516 has 1 context request of 2048 tokens beside 19 generation requests, 35.10 ms; 517 is a
    # dummy (`(dummy)`), 518 has zero generation and zero context tokens: both counted and left out;
    # 519: 20 requests, 10.79 ms, one second later.
    steps, notes, stdout = imported(tmp_path, LOGS / "constructed_iterations_plain.log")
    # starts: 21:44:40 − 10.99 ms = 21:44:39.989010, − 35.10 ms = 21:44:39.964900, 21:44:41 − 10.79 ms
    # = 21:44:40.989210. 516 starts before 515 (it ran longer); within one second line order decides step_id
    assert [pick(r, STEP) for r in steps] == [
        (second("2025-12-22T21:44:40"), t("2025-12-22T21:44:39.989010"), 10.99, 20, 0, None),
        (second("2025-12-22T21:44:40") + 1, t("2025-12-22T21:44:39.964900"), 35.10, 19, 2048, None),
        (second("2025-12-22T21:44:41"), t("2025-12-22T21:44:40.989210"), 10.79, 20, 0, None)]
    # plain: drafts 0, accepted 0, committed = generation requests 20, 19, 20
    assert [pick(r, COUNTS) for r in steps] == [(0, 0, 20, "iteration"), (0, 0, 19, "iteration"),
                                                (0, 0, 20, "iteration")]
    assert "1  dummy iteration" in stdout and "1  iteration with zero generation and zero context tokens" in stdout
    assert any(n.startswith("1 dummy iteration left out") and "plain.log:3" in n for n in notes)
    assert any(n.startswith("1 iteration with zero generation and zero context tokens left out")
               and "plain.log:4" in n for n in notes)


def test_constructed_speculative_log_spreads_each_window_by_largest_remainder(tmp_path):
    # constructed_iterations_spec.log: the layout of vllm#34860's iteration lines and of the newest spec
    # line (v1_newest.log), numbers edited. k = 3 (three per-position rates). Spec lines of engine 0 at
    # 16:21:10 (Accepted 6 / Drafted 9), 16:21:20 (20 / 33) and 16:21:30 (5 / 12).
    # Their own arithmetic: 9 / 3 = 3 drafts, mean 1 + 6/3 = 3.00; 33 / 3 = 11, 1 + 20/11 = 2.82, rates
    # 9/11 + 7/11 + 4/11 = 1.818; 12 / 3 = 4, 1 + 5/4 = 2.25, 3/4 + 1/4 + 1/4 = 1.25.
    assert (round(1 + 20 / 11, 2), round(20 / 33 * 100, 1), round(5 / 12 * 100, 1)) == (2.82, 60.6, 41.7)
    steps, notes, stdout = imported(tmp_path, LOGS / "constructed_iterations_spec.log", year="2026")
    # drafts = generation tokens − generation requests:
    #   188 (16:21:12): 16 − 4 = 12; 189 (16:21:12): 12 − 3 = 9; 190 (16:21:20): 16 − 4 = 12
    #   191 (16:21:25): 8 − 2 = 6; 192 (16:21:26): 7 − 2 = 5; 193 (16:21:31): after the last spec line
    # Window (16:21:10, 16:21:20] = 188, 189, 190 (190 ends at the line's own second: "at or before"):
    #   Σ drafts 33 = the line's Drafted 33; accepted = round(33 × 20 / 33) = 20, by drafts 12 : 9 : 12:
    #   20·12/33 = 7.27, 20·9/33 = 5.45, 20·12/33 = 7.27 → floors 7 + 5 + 7 = 19, one left for the largest
    #   remainder (189: 180 mod 33 = 15 against 240 mod 33 = 9) → 7, 6, 7; committed 4+7, 3+6, 4+7 = 11, 9, 11
    # Window (16:21:20, 16:21:30] = 191, 192: Σ drafts 11, the line says 12 (a difference, noted);
    #   accepted = round(11 × 5 / 12 = 4.58) = 5, by 6 : 5: 30/11 = 2.73, 25/11 = 2.27 → 2 + 2, the one left
    #   to 191 (30 mod 11 = 8 against 25 mod 11 = 3) → 3, 2; committed 2+3, 2+2 = 5, 4
    assert spread(20, [12, 9, 12]) == [7, 6, 7] and spread(5, [6, 5]) == [3, 2]
    assert [pick(r, COUNTS) for r in steps] == [
        (12, 7, 11, "window"), (9, 6, 9, "window"), (12, 7, 11, "window"),
        (6, 3, 5, "window"), (5, 2, 4, "window"), (None, None, None, None)]
    # each window's accepted adds up to round(Σ drafts × rate): 7 + 6 + 7 = 20, 3 + 2 = 5
    assert [pick(r, STEP) for r in steps] == [
        (second("2026-02-18T16:21:12"), t("2026-02-18T16:21:11.989750"), 10.25, 4, 0, pytest.approx(0.051)),
        (second("2026-02-18T16:21:12") + 1, t("2026-02-18T16:21:11.987600"), 12.40, 3, 512, pytest.approx(0.059)),
        (second("2026-02-18T16:21:20"), t("2026-02-18T16:21:19.999280"), 0.72, 4, 0, pytest.approx(0.059)),
        (second("2026-02-18T16:21:25"), t("2026-02-18T16:21:24.990200"), 9.80, 2, 0, pytest.approx(0.051)),
        (second("2026-02-18T16:21:26"), t("2026-02-18T16:21:25.990390"), 9.61, 2, 0, pytest.approx(0.051)),
        (second("2026-02-18T16:21:31"), t("2026-02-18T16:21:30.989750"), 10.25, 2, 0, pytest.approx(0.051))]
    # the spec lines still import as intervals, as before
    intervals = sorted(rows(tmp_path / "traces", "intervals"), key=lambda r: r["end_time"])
    assert [(r["num_draft_tokens"], r["num_accepted_tokens"]) for r in intervals] == [(9, 6), (33, 20), (12, 5)]
    assert any(n.startswith("committed tokens per step estimated from the spec-decode window's acceptance rate")
               for n in notes)
    assert any(n.startswith("1 step outside any spec-decode window") for n in notes)
    assert any("1 window whose steps' drafts" in n and "the steps drafted 11, the line counts 12" in n
               for n in notes)
    assert "disagree" not in stdout                     # the edited spec lines agree with themselves


def test_data_parallel_ranks_are_one_series_each_and_step_ids_stay_unique(tmp_path):
    # vllm#34860's two real lines as DP rank 0, and the same two with the prefix changed to rank 1 (constructed
    # in the test): four steps in one second, step_ids 0..3 in line order, each engine its own series
    lines = (LOGS / "iterations_kv_pr34860.log").read_text().splitlines()
    path = tmp_path / "dp.log"
    path.write_text("\n".join([lines[0], lines[0].replace("EngineCore_DP0", "EngineCore_DP1"),
                               lines[1], lines[1].replace("EngineCore_DP0", "EngineCore_DP1")]) + "\n")
    steps, notes, _ = imported(tmp_path, path, year="2026")
    assert [r["step_id"] for r in steps] == [second("2026-02-18T16:21:20") + i for i in range(4)]
    assert [r["duration_ms"] for r in steps] == [10.25, 10.25, 0.72, 0.72]
    assert any("2 engines: (EngineCore_DP0 pid=2733609), (EngineCore_DP1 pid=2733609)" in n for n in notes)


def test_auto_recognises_a_log_of_iteration_lines(tmp_path):
    head = (LOGS / "iterations_pr31193.log").read_text()
    assert sniff.vllm_log(head) == sniff.STRONG
    assert sniff.pick(LOGS / "iterations_pr31193.log") == ("vllm-log", ["vllm-log"])
    out = tmp_path / "auto"
    result = run("import", "auto", LOGS / "constructed_iterations_spec.log", "--deployment", "d", "--year",
                 "2026", "--out", out)
    assert result.exit_code == 0, result.output
    assert len(rows(out, "steps")) == 6 and len(rows(out, "intervals")) == 3


def test_frontend_layout_fields_are_read_by_label():
    # No complete pasted line of the frontend layout (PR #46647: `Engine 00N: Iteration(N): …, <device> KV cache
    # usage: P%`, then `, encoder inputs: N, encoder output embeddings: N`) was found (SOURCES.md, gaps): this
    # line is constructed from the real vllm#31193 line with the fields that PR's description names.
    real = (LOGS / "iterations_pr31193.log").read_text().splitlines()[0]
    message = real[real.index("Iteration("):]
    line = ("(APIServer pid=1) INFO 12-22 21:44:40 [loggers.py:182] Engine 001: " + message
            + ", GPU KV cache usage: 0.6%, encoder inputs: 4, encoder output embeddings: 3520")
    fields = parse_iteration(line[line.index("Iteration("):])
    assert (fields["gen_requests"], fields["elapsed_ms"], fields["device"], fields["dummy"]) == \
        (20, 10.99, "GPU", False)
    assert fields["kv_usage"] == pytest.approx(0.006)
    assert engine_of(line[:line.index("Iteration(")]) == (1, "Engine 001")
    assert engine_of("(EngineCore_DP3 pid=7) INFO 12-22 21:44:40 [core.py:349] ") == (3, None)
    assert parse_iteration(line[line.index("Iteration("):] + " (dummy)")["dummy"] is True


def test_arithmetic_between_fields_is_checked(tmp_path):
    # Edited in the test from the real lines: (1) vllm#34860's first line with its percentage changed from
    # 5.1 % to 7.0 % while its blocks still say 3500 / 68959 = 5.1 %: imported as printed, named in a note;
    # (2) vllm#31193's line with 21 generation tokens for 20 requests in a log without spec-decode lines:
    # committed tokens stay 20 (one per request), and a note counts the step.
    kv = (LOGS / "iterations_kv_pr34860.log").read_text().splitlines()[0].replace("kv cache: 5.1%", "kv cache: 7.0%")
    plain = (LOGS / "iterations_pr31193.log").read_text().splitlines()[0].replace("20 generation tokens",
                                                                                  "21 generation tokens")
    path = tmp_path / "edited.log"
    path.write_text(kv + "\n" + plain + "\n")
    steps, notes, _ = imported(tmp_path, path, year="2026")
    assert sorted((r["kv_usage"], r["num_committed_tokens"]) for r in steps if r.get("kv_usage") is not None) \
        == [(pytest.approx(0.07), 50)]
    assert [r["num_committed_tokens"] for r in steps if r.get("kv_usage") is None] == [20]
    assert any(n.startswith("1 iteration line whose printed kv cache percentage is not its used / total blocks")
               and "edited.log:1" in n for n in notes)
    assert any(n.startswith("1 step whose generation tokens differ from its generation requests") for n in notes)
