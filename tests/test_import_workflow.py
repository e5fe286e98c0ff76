"""Issue 38, part 2: imported traces go through every command.

Partitions (--partition, empty date= folders, rows without a time, rows after the import),
import auto with every importer's options, --start on llama.cpp blocks without any time,
one-line refusals and --list-layouts, all-or-nothing imports of several files, import
--progress, and no cache line on a report without rounds. Real lines only: the vLLM logs of
tests/fixtures/vllm_logs and the llama.cpp lines of tests/fixtures/llamacpp (SOURCES.md there).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import polars as pl
import pytest

from analyzer.ingest.importers import ImportInputError, import_all
from analyzer.ingest.importers.common import RUN, ImportRun, TraceWriter, finish, ImportSummary

from imported import UTC, rows, run, t

FIXTURES = Path(__file__).parent / "fixtures"
VLLM = FIXTURES / "vllm_logs"
LLAMA = FIXTURES / "llamacpp"


def snapshot(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every path under root with its kind, size and bytes: 'exactly as it was'."""
    found = {}
    for path in sorted(root.rglob("*")) if root.exists() else []:
        found[str(path.relative_to(root))] = (path.is_dir(), 0 if path.is_dir() else path.stat().st_size,
                                              b"" if path.is_dir() else path.read_bytes())
    return found


def notes(root: Path) -> list[str]:
    return [r["note"] for r in rows(root, "import_notes")]


# --------------------------------------------------------------------------- 1. partitions


def test_partition_date_then_nightly_for_two_dates_grows_the_history(tmp_path):
    traces, nightly = tmp_path / "traces", tmp_path / "nightly"
    # mtp_newest_1025.log: 10:25:23 and 10:25:33 spec lines of 05-19 → two intervals of 2026-05-19;
    # baseline_newest_no_mtp.log: the same server without MTP on 05-19 (load lines only: a baseline);
    # vllm_ascend_nightly.log: two spec lines of 08-05 → 2026-08-05
    for log, dep in (("mtp_newest_1025.log", "mtp"), ("baseline_newest_no_mtp.log", "base")):
        res = run("import", "vllm-log", VLLM / log, "--deployment", dep, "--model", "qwen", "--year", "2026",
                  "--partition", "date", "--out", traces)
        assert res.exit_code == 0, res.output
    # the folder is now date-partitioned: the next import follows it without --partition
    res = run("import", "vllm-log", VLLM / "vllm_ascend_nightly.log", "--deployment", "ascend", "--year", "2026",
              "--out", traces)
    assert res.exit_code == 0, res.output
    assert sorted(p.parent.name for p in (traces / "intervals").rglob("*.parquet")) == [
        "date=2026-05-19", "date=2026-05-19", "date=2026-08-05"]
    spec = [r for r in rows(traces, "intervals") if r["deployment_id"] == "mtp"]
    assert [r["end_time"] for r in spec] == [t("2026-05-19T10:25:23"), t("2026-05-19T10:25:33")]

    def history() -> list[tuple]:
        frame = pl.read_parquet(nightly / "history.parquet").sort("date", "deployment_id")
        return frame.select("date", "deployment_id", "method", "baseline_id").rows()

    # the README's walk-through ("From engine output"): report on the imported folder
    res = run("report", traces, "--no-cache")
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("# specan report\n\nInput rows: 3 deployments, 0 requests, 0 steps, 0 rounds")
    # exit 1: mtp's speedup can't be decided from two log lines (its verdict is 'unknown', a blocking gate)
    res = run("nightly", traces, "--date", "2026-05-19", "--out", nightly, "--no-cache")
    assert res.exit_code == 1, res.output
    assert (nightly / "2026-05-19" / "report.json").is_file()
    assert history() == [(dt.date(2026, 5, 19), "base", "none", None),
                         (dt.date(2026, 5, 19), "mtp", "unknown", "base")]
    # the second date adds its own row and keeps the first date's
    res = run("nightly", traces, "--date", "2026-08-05", "--out", nightly, "--no-cache")
    assert res.exit_code == 1, res.output
    assert history() == [(dt.date(2026, 5, 19), "base", "none", None),
                         (dt.date(2026, 5, 19), "mtp", "unknown", "base"),
                         (dt.date(2026, 8, 5), "ascend", "unknown", None)]


def test_empty_date_folders_a_user_made_partition_the_import(tmp_path):
    traces = tmp_path / "traces"
    (traces / "intervals" / "date=2026-01-01").mkdir(parents=True)     # made by hand, no files yet
    res = run("import", "vllm-log", VLLM / "mtp_newest_1025.log", "--deployment", "mtp", "--year", "2026",
              "--out", traces)
    assert res.exit_code == 0, res.output
    written = sorted(str(p.relative_to(traces).parent) for p in traces.rglob("*.parquet"))
    assert written == ["deployments/date=2026-05-19", "import_notes/date=2026-05-19", "intervals/date=2026-05-19"]


def test_partition_none_is_refused_in_a_date_partitioned_folder(tmp_path):
    traces = tmp_path / "traces"
    assert run("import", "vllm-log", VLLM / "mtp_newest_1025.log", "--deployment", "mtp", "--year", "2026",
               "--partition", "date", "--out", traces).exit_code == 0
    before = snapshot(traces)
    res = run("import", "vllm-log", VLLM / "mtp_newest_1027.log", "--deployment", "mtp", "--year", "2026",
              "--partition", "none", "--out", traces)
    assert res.exit_code == 2
    assert len(res.stderr.strip().splitlines()) == 1
    assert "already partitioned by date=; --partition none would mix flat files in" in res.stderr
    assert snapshot(traces) == before
    # --partition none into a new folder: flat files
    res = run("import", "vllm-log", VLLM / "mtp_newest_1025.log", "--deployment", "mtp", "--year", "2026",
              "--partition", "none", "--out", tmp_path / "flat")
    assert res.exit_code == 0, res.output
    assert sorted(p.parent.name for p in (tmp_path / "flat").rglob("*.parquet")) == [
        "deployments", "import_notes", "intervals"]


def test_a_row_without_a_time_goes_to_the_imports_date_with_a_note(tmp_path):
    out = tmp_path / "traces"
    token = RUN.set(ImportRun(partition="date"))
    try:
        writer = TraceWriter(out, "test")
        summary = ImportSummary("test", out)
        cols = {"deployment_id": ["d", "d"], "start_time": [None, None],
                "end_time": [None, int(dt.datetime(2026, 5, 19, 10, tzinfo=UTC).timestamp() * 1e6)],
                "num_draft_tokens": [4, 8], "num_accepted_tokens": [2, 6], "source": ["x", "x"]}
        writer.add("intervals", cols, times=[None, cols["end_time"][1]])
        finish(writer, summary, "d")
    finally:
        RUN.reset(token)
    today = dt.datetime.now(UTC).strftime("%Y-%m-%d")   # the import's date, as the writer takes it
    assert f"1 intervals row without a time of its own written to date={today} (the import's date, UTC)" in [
        text for _, text in summary.notes]
    assert sorted(p.parent.name for p in (out / "intervals").rglob("*.parquet")) == sorted(
        {f"date={today}", "date=2026-05-19"})


def test_rows_dated_after_the_import_are_noted(tmp_path):
    out = tmp_path / "traces"
    # --year 2999: 05-19 10:25:23 and 10:25:33 of 2999 lie after any run of this test
    res = run("import", "vllm-log", VLLM / "mtp_newest_1025.log", "--deployment", "mtp", "--year", "2999",
              "--out", out)
    assert res.exit_code == 0, res.output
    assert any(n.startswith("2 intervals rows dated after the import (the latest 2999-05-19T10:25:33Z, imported ")
               for n in notes(out))


# --------------------------------------------------------------------------- 2. import auto and the year


def test_auto_applies_each_option_where_it_fits_and_names_the_rest(tmp_path):
    out = tmp_path / "traces"
    vllm, llama = VLLM / "mtp_newest_1025.log", LLAMA / "noclock.log"
    res = run("import", "auto", vllm, llama, "--deployment", "d", "--year", "2026",
              "--start", "2026-05-20T08:00:00", "--out", out)
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines() == [
        f"{vllm}: vllm-log", f"{llama}: llamacpp-log",
        f"note: --year 2026 applied to {vllm} (vllm-log)",
        f"note: --year not used for {llama} (llamacpp-log) (it applies to vllm-log only)",
        f"note: --start 2026-05-20T08:00:00 applied to {vllm} (vllm-log), {llama} (llamacpp-log)"]
    # noclock.log's one block has no time at all: --start anchors it, lasting its total time 9872.17 ms
    llama_rows = [r for r in rows(out, "intervals") if r["source"] == "llamacpp_log"]
    assert [(r["start_time"], r["end_time"], r["num_drafts"], r["num_draft_tokens"], r["num_accepted_tokens"])
            for r in llama_rows] == [(t("2026-05-20T08:00:00"), t("2026-05-20T08:00:09.872170"), 18, 36, 36)]
    # a named source keeps its refusal
    res = run("import", "llamacpp-log", llama, "--deployment", "d", "--year", "2026", "--out", tmp_path / "x")
    assert res.exit_code == 2 and "--year applies to vllm-log only" in res.stderr


def test_a_first_date_after_the_import_reads_as_the_previous_year(tmp_path):
    # mtp_newest_1025.log's lines with their 05-19 replaced by 12-31 (only the date changed)
    log = tmp_path / "dec.log"
    log.write_text((VLLM / "mtp_newest_1025.log").read_text().replace(" 05-19 ", " 12-31 "))
    out = tmp_path / "traces"
    res = run("import", "vllm-log", log, "--deployment", "d", "--out", out)
    assert res.exit_code == 0, res.output
    now = dt.datetime.now(UTC)
    # 12-31 of this year lies more than a day ahead on every day but Dec 30 and 31: then last year
    ahead = dt.datetime(now.year, 12, 31, 10, 25, 23, tzinfo=UTC) > now + dt.timedelta(days=1)
    year = now.year - 1 if ahead else now.year
    assert [r["end_time"] for r in rows(out, "intervals")] == [t(f"{year}-12-31T10:25:23"),
                                                                t(f"{year}-12-31T10:25:33")]
    why = ("no --year: the current year, or the previous one for 1 series whose first date would lie after the "
           "import") if ahead else "no --year: the current year"
    assert f"log times have no year and no time zone: read as UTC in {year} ({why})" in res.stdout


def test_notes_name_the_start_actually_used(tmp_path):
    out = tmp_path / "traces"
    # v1_2025-04.log: one V1 line pasted without vLLM's prefix (no time): anchored at --start
    res = run("import", "vllm-log", VLLM / "v1_2025-04.log", "--deployment", "d", "--start", "2025-04-01",
              "--out", out)
    assert res.exit_code == 0, res.output
    assert "1 line without a date and time anchored at --start 2025-04-01: each series' first tick" in res.stdout
    assert "read as UTC in" not in res.stdout          # no line had vLLM's MM-DD date
    assert [r["end_time"] for r in rows(out, "intervals")] == [t("2025-04-01T00:00:00")]


# --------------------------------------------------------------------------- 3. --start and llama.cpp


def test_start_anchors_a_statistics_only_block_without_any_time(tmp_path):
    # noclock.log (rate.log lines 20-26) without its draft acceptance line (line 5), as stats.log does for
    # task 6173: a block that prints only its statistics line. b = 1 (the slot's first request), so the
    # counters are the request's: a = 18 verification steps, 36 drafted, 36 accepted.
    lines = (LLAMA / "noclock.log").read_text().splitlines(keepends=True)
    log = tmp_path / "stats_only.log"
    log.write_text("".join(lines[:4] + lines[5:]))
    refused = run("import", "llamacpp-log", log, "--deployment", "l", "--out", tmp_path / "no")
    assert refused.exit_code == 2 and "pass --start TIME" in refused.stderr
    out = tmp_path / "traces"
    res = run("import", "llamacpp-log", log, "--deployment", "l", "--start", "2026-05-20T08:00:00", "--out", out)
    assert res.exit_code == 0, res.output
    assert [(r["start_time"], r["end_time"], r["num_drafts"], r["num_draft_tokens"], r["num_accepted_tokens"])
            for r in rows(out, "intervals")] == [(t("2026-05-20T08:00:00"), t("2026-05-20T08:00:09.872170"),
                                                  18, 36, 36)]
    assert "statistics only (1)" in res.stdout


# --------------------------------------------------------------------------- 4. refusals and --list-layouts


def test_list_layouts_prints_one_layout_a_line_without_a_file():
    from analyzer.ingest.importers.vllm_iterations import LAYOUTS as ITERATION_LAYOUTS
    from analyzer.ingest.importers.vllm_log import LAYOUTS

    res = run("import", "vllm-log", "--list-layouts")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    # the six spec layouts, the load line and the three iteration-line layouts
    assert len(lines) == len(LAYOUTS) + 1 + len(ITERATION_LAYOUTS) == 10
    assert all(line.startswith("vllm-log: ") for line in lines)
    res = run("import", "trtllm-iter", "--list-layouts")
    assert res.exit_code == 0 and len(res.stdout.splitlines()) == 2, res.output
    res = run("import", "auto", "--list-layouts")
    assert res.exit_code == 0
    assert {line.split(":")[0] for line in res.stdout.splitlines()} >= {"vllm-log", "llamacpp-log", "sglang-log",
                                                                         "prometheus", "vllm-bench"}


def test_a_refusal_is_one_short_line(tmp_path):
    log = tmp_path / "uvicorn.log"
    log.write_text((VLLM / "baseline_v1_idle_tail.log").read_text().splitlines()[3] + "\n")
    res = run("import", "vllm-log", log, "--deployment", "b", "--out", tmp_path / "t")
    assert res.exit_code == 2
    message = res.stderr.strip()
    assert len(message.splitlines()) == 1 and len(message.replace(str(log), "")) < 300   # was ~1,500
    assert message.endswith("(layouts: `specan import vllm-log --list-layouts`)")


# --------------------------------------------------------------------------- 5. all or nothing


def test_several_files_are_all_or_nothing(tmp_path):
    traces = tmp_path / "traces"
    assert run("import", "vllm-log", VLLM / "mtp_newest_1025.log", "--deployment", "mtp", "--year", "2026",
               "--out", traces).exit_code == 0
    before = snapshot(traces)
    # auto: the vLLM log would import, noclock.log (llama.cpp, no time, no --start) is refused
    res = run("import", "auto", VLLM / "mtp_newest_1027.log", LLAMA / "noclock.log", "--deployment", "mtp",
              "--year", "2026", "--out", traces)
    assert res.exit_code == 2
    assert snapshot(traces) == before
    # one source, two files: rate.log imports, noclock.log (no time, no --start) imports nothing
    res = run("import", "llamacpp-log", LLAMA / "rate.log", LLAMA / "noclock.log", "--deployment", "mtp",
              "--out", traces)
    assert res.exit_code == 2 and "noclock.log: nothing to import" in res.stderr
    assert snapshot(traces) == before


def test_a_failed_commit_is_rolled_back(tmp_path, monkeypatch):
    traces = tmp_path / "traces"
    assert run("import", "vllm-log", VLLM / "mtp_newest_1025.log", "--deployment", "mtp", "--year", "2026",
               "--out", traces).exit_code == 0
    before = snapshot(traces)
    commit, calls = TraceWriter.commit, []

    def failing(self, summary):
        calls.append(self.source)
        if len(calls) == 2:                 # the second group's commit fails after the first was written
            raise OSError(28, "No space left on device")
        commit(self, summary)

    monkeypatch.setattr(TraceWriter, "commit", failing)
    groups = {"vllm-log": [VLLM / "mtp_newest_1027.log"], "llamacpp-log": [LLAMA / "notime.log"]}
    with pytest.raises(OSError):
        import_all(groups, traces, ["mtp"], auto=True, year=2026, start="2026-05-20T08:00:00",
                   num_speculative_tokens=2)
    assert calls == ["vllm-log", "llamacpp-log"]
    assert snapshot(traces) == before


def test_reimporting_and_failing_puts_the_replaced_files_back(tmp_path, monkeypatch):
    traces = tmp_path / "traces"
    assert run("import", "vllm-log", VLLM / "mtp_newest_1025.log", "--deployment", "mtp", "--year", "2026",
               "--out", traces).exit_code == 0
    before = snapshot(traces)

    def failing(self, summary):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("analyzer.ingest.importers.common.TraceWriter._write_manifest", failing)
    with pytest.raises(OSError):    # the same input again: its files are replaced, then the manifest fails
        import_all({"vllm-log": [VLLM / "mtp_newest_1025.log"]}, traces, ["mtp"], year=2026)
    assert snapshot(traces) == before


# --------------------------------------------------------------------------- 6. --progress


def test_import_progress_counts_the_bytes_read(tmp_path):
    log = VLLM / "mtp_newest_1025.log"
    read: list[int] = []
    import_all({"vllm-log": [log]}, tmp_path / "traces", ["d"], year=2026, read_bytes=read.append)
    assert sum(read) == os.path.getsize(log)
    res = run("import", "vllm-log", log, "--deployment", "d", "--year", "2026", "--progress",
              "--out", tmp_path / "cli")
    assert res.exit_code == 0, res.output
    assert "reading" in res.stderr                   # click's progressbar, on stderr
    assert "reading" not in res.stdout


# --------------------------------------------------------------------------- 7. the cache line


def test_no_cache_line_on_a_report_without_rounds(tmp_path):
    traces = tmp_path / "traces"
    assert run("import", "vllm-log", VLLM / "mtp_newest_1025.log", "--deployment", "mtp", "--year", "2026",
               "--out", traces).exit_code == 0
    for flags in ((), ("--progress",)):
        res = run("report", traces, "--cache-dir", tmp_path / "cache", *flags)
        assert res.exit_code == 0, res.output
        assert "cache" not in res.stderr, res.stderr


def test_groups_of_one_auto_import_that_disagree_on_a_deployment_write_nothing(tmp_path):
    out = tmp_path / "traces"
    # mtp_newest_1025.log prints two per-position rates (k = 2); mean.log's llama.cpp lines three (k = 3):
    # the vLLM group is written first, the llama.cpp group's deployments row then conflicts, and the
    # vLLM group's files are taken back (the folder did not exist before)
    res = run("import", "auto", VLLM / "mtp_newest_1025.log", LLAMA / "mean.log", "--deployment", "d",
              "--year", "2026", "--out", out)
    assert res.exit_code == 2
    assert res.stderr.splitlines()[-1].endswith(
        "deployment 'd' is imported with num_speculative_tokens = 2 from another file of this import, this one "
        "gives 3; pass --num-speculative-tokens to match, or import them under different deployments")
    assert not out.exists()


def test_start_anchors_the_docs_example_block(tmp_path):
    from analyzer.ingest.importers import llamacpp_log

    # the print_timing block the importer's docstring shows (layout 1, no time on any line)
    doc = llamacpp_log.__doc__
    block = doc[doc.index("::\n\n") + 4:doc.index("\n\n1. ")]
    log = tmp_path / "doc.log"
    log.write_text("\n".join(line[4:] for line in block.splitlines()) + "\n")
    assert log.read_text().startswith("slot print_timing: id  0 | task 854 |\nprompt eval time =")
    out = tmp_path / "traces"
    res = run("import", "llamacpp-log", log, "--deployment", "l", "--start", "2026-05-20T08:00:00", "--out", out)
    assert res.exit_code == 0, res.output
    # 149 accepted of 213 generated; from --start for its total time, 35932.18 ms
    assert [(r["start_time"], r["end_time"], r["num_draft_tokens"], r["num_accepted_tokens"])
            for r in rows(out, "intervals")] == [(t("2026-05-20T08:00:00"), t("2026-05-20T08:00:35.932180"),
                                                  213, 149)]
