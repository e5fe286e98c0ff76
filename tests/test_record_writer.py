"""The recorder's writer (analyzer/record/writer.py), engine-agnostic: rows buffered, written off
the caller's thread into date (or hour) partitions, each file renamed into place whole; bounded
memory with the dropped rows counted in a note; a failure said once, the files written before
kept. The recorder inside vLLM itself is tested against the real package in
tests/test_vllm_recorder.py."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from analyzer.cli import main
from analyzer.record.writer import STAGING, RecorderUnusable, Settings, TraceWriter, utc_us

DAY = dt.datetime(2026, 11, 30, 23, 59, 50, tzinfo=dt.timezone.utc).timestamp()   # ten seconds before midnight
STEPS = ["deployment_id", "step_id", "start_time", "duration_ms", "batch_size", "num_committed_tokens",
         "counts_from"]
DEPLOYMENTS = ["deployment_id", "model", "method", "num_speculative_tokens"]


def writer(folder: Path, clock, **settings) -> tuple[TraceWriter, list[str]]:
    said: list[str] = []
    w = TraceWriter(Settings(folder, **{"flush_seconds": 3600, **settings}), f"{os.getpid()}-test",
                    {"steps": STEPS}, {"steps": "start_time"}, "vllm_recorder", "dep", said.append, clock=clock,
                    replicated={"deployments": (DEPLOYMENTS, lambda: ("dep", "m", "none", 0))})
    return w, said


def step(i: int, at: float) -> tuple:
    return ("dep", i, utc_us(at), 10.0, 2, 2, "iteration")


def files(folder: Path, table: str) -> list[str]:
    return sorted(str(p.relative_to(folder / table).parent) for p in (folder / table).rglob("*.parquet"))


def test_rows_reach_their_date_partition_only_as_whole_files(tmp_path):
    now = [DAY]
    w, said = writer(tmp_path, lambda: now[0])
    for i in range(5):
        w.add("steps", step(i, DAY + 3 * i))            # 23:59:50 … 00:00:02 the next day
    w.flush()
    # written into the staging folder, not yet in the table's folder: a reader sees nothing partial
    assert not (tmp_path / "steps").exists()
    assert list((tmp_path / STAGING).rglob("*.partial"))
    now[0] = DAY + 400                                   # past rotate_seconds (300)
    w.flush()
    assert files(tmp_path, "steps") == ["date=2026-11-30", "date=2026-12-01"]
    # the deployments row beside each date it has rows in
    assert files(tmp_path, "deployments") == ["date=2026-11-30", "date=2026-12-01"]
    rows = sorted(r["step_id"] for p in (tmp_path / "steps").rglob("*.parquet") for r in pq.read_table(p).to_pylist())
    assert rows == [0, 1, 2, 3, 4] and w.written == {"steps": 5} and said == []
    w.close()
    assert not list((tmp_path / STAGING).rglob("*.partial"))


def test_hour_partitions_and_the_last_rows_at_close(tmp_path):
    w, _ = writer(tmp_path, lambda: DAY, partition="hour")
    w.add("steps", step(1, DAY))
    w.add("steps", step(2, DAY + 20))
    w.close()                                            # the open files renamed into place at the end
    assert files(tmp_path, "steps") == ["date=2026-11-30/hour=23", "date=2026-12-01/hour=00"]


def test_a_full_buffer_drops_rows_and_every_report_counts_them(tmp_path):
    w, said = writer(tmp_path, lambda: DAY + 5, max_rows=3)
    kept = [w.add("steps", step(i, DAY + i)) for i in range(5)]
    assert kept == [True, True, True, False, False]
    w.close()
    assert w.written == {"steps": 3}
    assert len(said) == 1 and "steps buffer (3 rows) was full and 2 rows were dropped" in said[0]
    doc = json.loads(CliRunner().invoke(main, ["report", str(tmp_path), "--format", "json"]).stdout)
    assert any("the recorder dropped 2 steps rows between 2026-11-30 23:59:53 and 2026-11-30 23:59:54 UTC"
               in note for note in doc["notes"]), doc["notes"]


def test_a_folder_that_cannot_be_written_is_refused_at_once(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(RecorderUnusable, match="cannot write to .*file/traces"):
        writer(blocker / "traces", lambda: DAY)


def test_a_failure_while_writing_is_said_once_and_stops_the_writer(tmp_path):
    now = [DAY]
    w, said = writer(tmp_path, lambda: now[0])
    w.add("steps", step(1, DAY))
    now[0] = DAY + 400
    w.flush()                                            # one file renamed into place
    (tmp_path / STAGING).rename(tmp_path / "gone")      # the staging folder taken away
    (tmp_path / STAGING).write_text("")
    w.add("steps", step(2, DAY + 401))
    w._guarded(final=False)
    assert w.failed and len(said) == 1 and said[0].startswith(f"specan recorder stopped writing to {tmp_path}")
    assert w.add("steps", step(3, DAY + 402)) is False   # nothing more is taken
    w.close()
    # the file written before is whole and reads
    assert [r["step_id"] for p in (tmp_path / "steps").rglob("*.parquet") for r in pq.read_table(p).to_pylist()] == [1]


def test_the_staging_folder_of_a_dead_run_is_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / STAGING / f"{dead.stdout.strip()}-e0-20261130T000000Z"
    stale.mkdir(parents=True)
    (stale / "steps.x.parquet.partial").write_bytes(b"PAR1")
    w, _ = writer(tmp_path, lambda: DAY)
    assert not stale.exists() and w.staging.exists()
    w.close()


@pytest.mark.parametrize("env, problem", [
    ({"SPECAN_RECORD_DIR": "x", "SPECAN_RECORD_PARTITION": "week"}, "SPECAN_RECORD_PARTITION='week'"),
    ({"SPECAN_RECORD_DIR": "x", "SPECAN_RECORD_MAX_ROWS": "1.5"}, "SPECAN_RECORD_MAX_ROWS='1.5': expected a positive whole"),
    ({"SPECAN_RECORD_DIR": "x", "SPECAN_RECORD_ROTATE_SECONDS": "-1"}, "SPECAN_RECORD_ROTATE_SECONDS='-1'"),
])
def test_settings_that_are_not_valid_are_refused(env, problem):
    with pytest.raises(RecorderUnusable, match=problem.replace("(", r"\(")):
        Settings.from_environment(env)


def test_no_folder_no_recording_and_the_defaults():
    assert Settings.from_environment({}) is None and Settings.from_environment({"SPECAN_RECORD_DIR": " "}) is None
    s = Settings.from_environment({"SPECAN_RECORD_DIR": "~/traces", "SPECAN_RECORD_DEPLOYMENT": "eagle-a"})
    assert (s.folder, s.deployment_id, s.partition, s.flush_seconds, s.rotate_seconds, s.interval_seconds,
            s.max_rows) == (Path("~/traces").expanduser(), "eagle-a", "date", 5.0, 300.0, 10.0, 100_000)
