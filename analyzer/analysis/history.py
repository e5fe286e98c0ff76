"""Nightly history: one row per (date, deployment_id) of headline metrics (the regression
rule that judges it is ``analyzer.decide.regression``).

``history.parquet`` is rewritten whole on every run: written to a temporary
file beside it and renamed over it, so a crash at any point leaves either the
old or the new file, never a torn one. Running a date again replaces that
date's rows and touches no other date.

Runs for different dates may overlap (a backfill with ``xargs -P``, cron
entries that run long). Each one reads the history, merges its date in and
renames a new file over it, so without coordination the last rename wins and
the other runs' rows are lost. The read-modify-write is therefore serialised
by an exclusive ``fcntl.flock`` on ``history.parquet.lock`` beside the
history, held from the read to the rename (:func:`locked`). A run that cannot
get the lock within its timeout raises :class:`HistoryLocked`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from ..errors import EnvironmentProblem
from ..outputs import output_target, written_aside

# Seconds a run waits for another run's read-modify-write of the history.
LOCK_TIMEOUT = 600.0
LOCK_POLL = 0.05

# Headline metrics kept per day; the first three are checked for regressions
# (analyzer.decide.regression.CHECKED).
HISTORY_SCHEMA = {
    "date": pl.Date,
    "deployment_id": pl.Utf8,
    "method": pl.Utf8,
    "baseline_id": pl.Utf8,
    "num_rounds": pl.Int64,
    "mean_accept_length": pl.Float64,
    "speedup": pl.Float64,
    "tpot_p99": pl.Float64,
    "acceptance_rate": pl.Float64,
    "tokens_per_round": pl.Float64,
    "speedup_coverage": pl.Float64,
    "ttft_p99": pl.Float64,
    "itl_p99": pl.Float64,
    "max_stall_p99": pl.Float64,
}


def history_rows(doc: dict[str, Any], date: dt.date) -> pl.DataFrame:
    """The day's rows, from a report document."""
    def p99(d: dict, metric: str) -> float | None:
        return (d.get("latency_ms", {}).get(metric) or {}).get("p99")

    rows = [{
        "date": date,
        "deployment_id": d["deployment_id"],
        "method": d["method"],
        "baseline_id": d["baseline_id"],
        "num_rounds": d["num_rounds"],
        "mean_accept_length": d["mean_accept_length"],
        "speedup": d["speedup"],
        "tpot_p99": p99(d, "tpot"),
        "acceptance_rate": d["acceptance_rate"],
        "tokens_per_round": d["tokens_per_round"],
        "speedup_coverage": d["speedup_coverage"],
        "ttft_p99": p99(d, "ttft"),
        "itl_p99": p99(d, "itl"),
        "max_stall_p99": p99(d, "max_stall"),
    } for d in doc["deployments"]]
    return pl.DataFrame(rows, schema=HISTORY_SCHEMA)


class HistoryLocked(EnvironmentProblem):
    """Another run held the history's lock file for longer than the timeout (exit status 3)."""

    def __init__(self, lock_path: Path, timeout: float):
        self.lock_path = Path(lock_path)
        self.timeout = timeout
        super().__init__(f"history is locked: could not lock {self.lock_path} within {timeout:g} s "
                         f"(another specan nightly is updating it; retry when it has finished)")


# Why the history and its lock can't be a FIFO, a device or a socket (outputs.check_output):
# the history is read back, the lock opened and locked, by every run.
HISTORY_REGULAR = "the history is read back by the next run, so it must be a regular file"
LOCK_REGULAR = "every run opens and locks it, so it must be a regular file"


def lock_path(path: Path) -> Path:
    """The lock file beside the history: ``history.parquet`` -> ``history.parquet.lock``.
    A history that is a symbolic link is written through to its target, so the lock is
    beside the target: every link to one history takes the same lock."""
    path = output_target(path)
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def locked(path: Path, timeout: float = LOCK_TIMEOUT, poll: float = LOCK_POLL) -> Iterator[Path]:
    """Hold an exclusive lock on the history at ``path`` for the ``with`` block.

    The lock is ``fcntl.flock`` on ``<path>.lock`` (created if missing), tried
    without blocking every ``poll`` seconds until ``timeout`` seconds have passed,
    then :class:`HistoryLocked`. It is released when the block ends, also on an
    exception, and by the kernel if the process dies. The lock file is left in
    place on release: deleting it would race, since a waiting run may already
    have opened it and would then lock a file that no longer has that name while
    a third run creates and locks a new one, both inside the block at once.
    """
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise HistoryLocked(lock, timeout) from None
                time.sleep(min(poll, remaining))
        try:
            yield lock
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def read_history(path: Path) -> pl.DataFrame:
    if not path.exists():
        return pl.DataFrame(schema=HISTORY_SCHEMA)
    return pl.read_parquet(path)


def merge(history: pl.DataFrame, day: pl.DataFrame) -> pl.DataFrame:
    """The history with ``day``'s dates replaced by ``day``'s rows; other dates untouched."""
    dates = day.get_column("date").unique().to_list()
    return (pl.concat([history.filter(~pl.col("date").is_in(dates)), day], how="diagonal_relaxed")
            .sort(["date", "deployment_id"]))


def upsert(path: Path, day: pl.DataFrame, *, timeout: float = LOCK_TIMEOUT) -> pl.DataFrame:
    """Replace the rows of ``day``'s date in the history at ``path``; write aside, then rename.

    Read, merge and rename happen under :func:`locked`, so concurrent upserts
    of different dates all survive.
    """
    with locked(path, timeout=timeout):
        merged = merge(read_history(path), day)
        write_atomic(path, merged)
    return merged


def write_atomic(path: Path, merged: pl.DataFrame) -> None:
    """Write to a temporary file in the same directory, then rename over ``path`` (through
    a symbolic link, over its target); the history gets the mode the report files get
    (``outputs.written_aside``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with written_aside(path) as tmp:
        merged.write_parquet(tmp)
