"""Trace rows from a live engine, buffered in memory and written as Parquet off its thread.

The engine's thread only appends a tuple to a bounded buffer (``TraceWriter.add``, a
deque append: no I/O, no Arrow, no lock). A thread of the writer's own drains the
buffers every ``flush_seconds`` into one open Parquet file per table and partition
(``date=YYYY-MM-DD``, or ``date=…/hour=HH``), written under a hidden staging folder,
``FOLDER/.recording/<run>/``. Every ``rotate_seconds`` (and when its partition is past,
and at the end) a file is closed and renamed into its table's folder: a reader of
FOLDER sees whole files only, at any time, and ``specan report FOLDER`` runs while the
engine writes.

It never harms the engine:

- memory is bounded: a buffer holds at most ``max_rows`` rows; beyond, rows are dropped
  and counted, and the count becomes a note in ``import_notes/`` (every report shows
  it) and one warning in the engine's log;
- a failure to write (a full disk, a folder taken away) is logged once; the writer
  stops, drops its buffers and takes nothing more. Files already renamed into place
  stay whole and readable;
- a killed process loses what was buffered and the open staging files (hidden, never
  read); files closed before stay. A later run removes the staging folders of runs
  whose process is gone.
"""

from __future__ import annotations

import atexit
import datetime as dt
import os
import re
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..ingest.schema import IMPORT_NOTES_SCHEMA, arrow_schema

RECORD_DIR_ENV = "SPECAN_RECORD_DIR"
STAGING = ".recording"
NOTES_TABLE = "import_notes"

Log = Callable[[str], None]


class RecorderUnusable(Exception):
    """The folder cannot be written (or the settings are wrong): record nothing, say why once."""


@dataclass(frozen=True)
class Settings:
    """Where and how the recorder writes (docs/recorder.md): from ``SPECAN_RECORD_*``."""

    folder: Path
    deployment_id: str | None = None
    partition: str = "date"            # "date", or "hour" for date=…/hour=HH/ folders
    flush_seconds: float = 5.0
    rotate_seconds: float = 300.0
    interval_seconds: float = 10.0
    max_rows: int = 100_000

    @classmethod
    def from_environment(cls, env=None) -> Settings | None:
        """The settings the environment gives; None when ``SPECAN_RECORD_DIR`` is unset or
        empty (recording is opt-in). ``RecorderUnusable`` for a value that is not valid."""
        env = os.environ if env is None else env
        folder = env.get(RECORD_DIR_ENV, "").strip()
        if not folder:
            return None
        partition = env.get("SPECAN_RECORD_PARTITION", "date").strip() or "date"
        if partition not in ("date", "hour"):
            raise RecorderUnusable(f"SPECAN_RECORD_PARTITION={partition!r}: expected date or hour")
        numbers = {}
        for name, default, kind in (("flush_seconds", cls.flush_seconds, float),
                                    ("rotate_seconds", cls.rotate_seconds, float),
                                    ("interval_seconds", cls.interval_seconds, float),
                                    ("max_rows", cls.max_rows, int)):
            key = "SPECAN_RECORD_" + name.upper()
            text = env.get(key, "").strip()
            try:
                value = kind(text) if text else default
            except ValueError:
                value = None
            if value is None or value <= 0:
                raise RecorderUnusable(f"{key}={text!r}: expected a positive {'whole number' if kind is int else 'number'}")
            numbers[name] = value
        deployment = env.get("SPECAN_RECORD_DEPLOYMENT", "").strip() or None
        return cls(Path(folder).expanduser(), deployment, partition, **numbers)


def utc_us(seconds: float) -> int:
    """Epoch seconds (``time.time()``) as whole microseconds, the traces' TIMESTAMP."""
    return round(seconds * 1_000_000)


class TraceWriter:
    """Rows of the trace tables, buffered and written by a thread of their own.

    ``tables`` maps each table to the columns its rows hold, in order, and ``times`` each
    table to the column whose time places a row in its partition. ``run`` names this
    writer's files (unique per process and engine). ``log(text)`` is the engine's log.
    ``replicated`` maps a table (deployments) to its columns and a function giving its one
    row: written once into each date partition the other tables' rows land in, since a
    row of a date partition is matched with the deployments row of its own date."""

    def __init__(self, settings: Settings, run: str, tables: dict[str, list[str]], times: dict[str, str],
                 source: str, deployment_id: str, log: Log, clock: Callable[[], float] = time.time,
                 replicated: dict[str, tuple[list[str], Callable[[], tuple]]] | None = None):
        self.settings = settings
        self.run = run
        self.columns = dict(tables)
        self.time_index = {t: self.columns[t].index(times[t]) for t in self.columns}
        self.schemas = {t: arrow_schema(t, c) for t, c in self.columns.items()}
        self.source = source
        self.deployment_id = deployment_id
        self.log = log
        self.clock = clock
        self.buffers: dict[str, deque] = {t: deque() for t in self.columns}
        self.dropped: dict[str, list] = {t: [0, None, None] for t in self.columns}   # rows, first, last
        self.dropped_said: set[str] = set()
        self.notes: deque = deque(maxlen=1000)
        self.failed = False
        self.open: dict[tuple[str, str], _OpenFile] = {}
        self.sequence = 0
        self.written = {t: 0 for t in self.columns}     # rows renamed into place, per table
        self.files_written = 0
        self.busy_seconds = 0.0
        self._partition_names: dict[int, str] = {}
        self.replicated = dict(replicated or {})
        self.replicated_dates: set[str] = set()
        self._stop = threading.Event()
        self.staging = settings.folder / STAGING / run
        try:
            settings.folder.mkdir(parents=True, exist_ok=True)
            _remove_stale_staging(settings.folder / STAGING)
            self.staging.mkdir(parents=True, exist_ok=True)
            probe = self.staging / ".probe"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise RecorderUnusable(f"cannot write to {settings.folder}: {exc.strerror or exc}") from None
        self.thread = threading.Thread(target=self._run, name=f"specan-recorder-{run}", daemon=True)
        self.thread.start()
        atexit.register(self.close)

    # -- the engine's side: appends only

    def add(self, table: str, row: tuple) -> bool:
        """Buffer one row of ``table``; False when it was dropped (buffer full, or stopped)."""
        if self.failed:
            return False
        buffer = self.buffers[table]
        if len(buffer) >= self.settings.max_rows:
            counted = self.dropped[table]
            counted[0] += 1
            at = row[self.time_index[table]]
            counted[1] = at if counted[1] is None else counted[1]
            counted[2] = at
            return False
        buffer.append(row)
        return True

    def note(self, text: str) -> None:
        """A note for every report over these traces (``import_notes``)."""
        if not self.failed:
            self.notes.append((text, utc_us(self.clock())))

    def close(self) -> None:
        """Write what is buffered and rename every open file into place; stop the thread."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join()
        try:
            atexit.unregister(self.close)
        except Exception:       # interpreter shutting down
            pass

    # -- the writer's thread

    def _run(self) -> None:
        while not self._stop.wait(self.settings.flush_seconds):
            self._guarded(final=False)
        self._guarded(final=True)
        # every file renamed into place: the staging folder goes (and its parent, once empty)
        for folder in (self.staging, self.staging.parent):
            try:
                folder.rmdir()
            except OSError:
                break

    def _guarded(self, final: bool) -> None:
        if self.failed:
            return
        started = time.perf_counter()
        try:
            self.flush(final)
        except Exception as exc:           # a full disk, a folder gone: said once, never raised
            self._fail(exc)
        finally:
            # the writer's own time (it shares the engine's interpreter): bench/recorder.py states it
            self.busy_seconds += time.perf_counter() - started

    def _fail(self, exc: BaseException) -> None:
        self.failed = True
        for buffer in self.buffers.values():
            buffer.clear()
        for handle in self.open.values():
            handle.abandon()
        self.open.clear()
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        self.log(f"specan recorder stopped writing to {self.settings.folder}: {reason}. The engine goes on "
                 f"without it; the {self.files_written} files already written stay readable")

    def flush(self, final: bool = False) -> None:
        """Drain the buffers into the open files; rename into place the files that are due
        (``rotate_seconds`` old, of a past partition, or all of them when ``final``)."""
        now = self.clock()
        for table, buffer in self.buffers.items():
            rows = [buffer.popleft() for _ in range(len(buffer))]
            if rows:
                self._append(table, rows, now)
        self._say_drops()
        if self.notes:
            notes = [self.notes.popleft() for _ in range(len(self.notes))]
            self._write_notes(notes)
        current = self._partition(utc_us(now))
        for key, handle in list(self.open.items()):
            if final or now - handle.opened_at >= self.settings.rotate_seconds or key[1] < current:
                self._publish(key)

    def _partition(self, us: int) -> str:
        # a row's partition is its day (or hour) of UTC: the names are kept per day or hour,
        # so a row costs a division and a lookup, not a datetime
        span = 3_600_000_000 if self.settings.partition == "hour" else 86_400_000_000
        slot = us // span
        text = self._partition_names.get(slot)
        if text is None:
            moment = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=slot * span)
            text = f"date={moment:%Y-%m-%d}"
            text = text + f"/hour={moment:%H}" if self.settings.partition == "hour" else text
            self._partition_names[slot] = text
        return text

    def _append(self, table: str, rows: list[tuple], now: float) -> None:
        index = self.time_index[table]
        by_partition: dict[str, list[tuple]] = {}
        for row in rows:
            by_partition.setdefault(self._partition(row[index]), []).append(row)
        schema = self.schemas[table]
        for partition in by_partition:
            self._replicate(partition.split("/")[0])
        for partition, part in sorted(by_partition.items()):
            key = (table, partition)
            if key not in self.open:
                self.open[key] = self._new_file(table, partition, schema, now)
            self.open[key].write(_rows_table(part, schema))

    def _replicate(self, date: str) -> None:
        """The replicated tables' row in the date partition ``date`` (once per run)."""
        if date in self.replicated_dates:
            return
        for table, (columns, row) in self.replicated.items():
            self._write_file(table, date, arrow_schema(table, columns), [row()])
        self.replicated_dates.add(date)

    def _write_file(self, table: str, partition: str, schema: pa.Schema, rows: list[tuple]) -> None:
        """A whole file of ``rows`` at once, renamed into place."""
        handle = self._new_file(table, partition, schema, 0.0)
        handle.write(_rows_table(rows, schema))
        handle.publish()
        self.files_written += 1

    def _new_file(self, table: str, partition: str, schema: pa.Schema, opened_at: float) -> _OpenFile:
        """The next file of this run, staged until published into ``table/partition/``."""
        self.sequence += 1
        name = f"{_safe(self.deployment_id)}.{self.run}.{self.sequence:06d}.parquet"
        return _OpenFile(self.staging / f"{table}.{name}.partial", self.settings.folder / table / partition / name,
                         schema, opened_at)

    def _publish(self, key: tuple[str, str]) -> None:
        handle = self.open.pop(key)
        rows = handle.publish()
        self.files_written += 1
        if key[0] in self.written:
            self.written[key[0]] += rows

    def _say_drops(self) -> None:
        for table, counted in self.dropped.items():
            n, first, last = counted
            if not n:
                continue
            counted[:] = [0, None, None]
            self.notes.append((f"the recorder dropped {n:,} {table} row{'s' if n != 1 else ''} between "
                               f"{_utc_text(first)} and {_utc_text(last)} UTC: its buffer of "
                               f"{self.settings.max_rows:,} rows per table was full (the disk fell behind the "
                               "engine); the report counts only the rows written", utc_us(self.clock())))
            if table not in self.dropped_said:
                self.dropped_said.add(table)
                self.log(f"specan recorder: its {table} buffer ({self.settings.max_rows:,} rows) was full and "
                         f"{n:,} rows were dropped; every report over {self.settings.folder} says how many")

    def _write_notes(self, notes: list[tuple[str, int]]) -> None:
        by_partition: dict[str, list] = {}
        for text, at in notes:
            by_partition.setdefault(self._partition(at), []).append((self.source, self.deployment_id, text, at))
        for partition, rows in by_partition.items():
            self._write_file(NOTES_TABLE, partition, IMPORT_NOTES_SCHEMA, rows)


class _OpenFile:
    """One Parquet file being written in the staging folder, renamed into place when done."""

    def __init__(self, staging: Path, final: Path, schema: pa.Schema, opened_at: float):
        self.staging, self.final, self.opened_at = staging, final, opened_at
        self.writer = pq.ParquetWriter(staging, schema)
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        self.writer.write_table(table)
        self.rows += table.num_rows

    def publish(self) -> int:
        """Close, flush to disk, rename into the table's folder (the same file system: atomic)."""
        self.writer.close()
        fd = os.open(self.staging, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.staging, self.final)
        return self.rows

    def abandon(self) -> None:
        try:
            self.writer.close()
        except Exception:
            pass


def _rows_table(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    """Row tuples (in the schema's column order) as an Arrow table."""
    columns = list(zip(*rows))
    return pa.table([pa.array(values, type=field.type) for values, field in zip(columns, schema)], schema=schema)


def _safe(text: str) -> str:
    """A deployment id as part of a file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:80] or "deployment"


def _utc_text(us: int | None) -> str:
    if us is None:
        return "?"
    return (dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=us)).strftime(
        "%Y-%m-%d %H:%M:%S")


def _remove_stale_staging(root: Path) -> None:
    """Staging folders of runs whose process is gone (killed while writing): their partial
    files were never renamed into place, and never will be."""
    if not root.is_dir():
        return
    for folder in root.iterdir():
        pid = folder.name.split("-")[0] if folder.is_dir() else ""
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
