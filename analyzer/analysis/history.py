"""Nightly history: one row per (date, deployment_id) of headline metrics, and regression flags.

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
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from ..errors import EnvironmentProblem
from ..outputs import written_aside
from .config import Nightly, Regression

# Seconds a run waits for another run's read-modify-write of the history.
LOCK_TIMEOUT = 600.0
LOCK_POLL = 0.05

# Headline metrics kept per day; the first three are checked for regressions.
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

# metric -> (config attribute, direction): a drop below -limit or a rise above +limit,
# where limit = max(threshold, the window's robust spread) (check_regressions).
CHECKED = {
    "mean_accept_length": ("max_accept_length_drop", "drop"),
    "speedup": ("max_speedup_drop", "drop"),
    "tpot_p99": ("max_tpot_p99_rise", "rise"),
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


def lock_path(path: Path) -> Path:
    """The lock file beside the history: ``history.parquet`` -> ``history.parquet.lock``."""
    path = Path(path)
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
    """Write to a temporary file in the same directory, then rename over ``path``; the
    history gets the mode the report files get (``outputs.written_aside``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with written_aside(path) as tmp:
        merged.write_parquet(tmp)


# The window's spread is SPREAD_SDS robust standard deviations: 1.4826 · MAD (the median
# absolute deviation from the median) estimates the standard deviation of normal noise, and
# one bad day moves the median and the MAD by at most one rank, where it set (max − min)
# outright. SPREAD_SDS is chosen on 21 simulated days (docs/commands.md, bench/nightly_study.py).
MAD_TO_SD = 1.4826
SPREAD_SDS = 4.0


def check_regressions(history: pl.DataFrame, date: dt.date, rule: Regression,
                      nightly: Nightly | None = None) -> tuple[dict, list[dict]]:
    """Compare ``date`` with its window of earlier dates, per deployment: ``(check, flagged)``.

    The window of a deployment's metric on a date is its latest ``rule.window_days``
    earlier dates (earlier than that date only: dates after it, as in a backfill, never
    count) that were not flagged for that metric, and, when the date is on or after the
    deployment's ``accept_since``, none before it. Whether an earlier date was flagged is
    not stored: :func:`replay` judges the deployment's dates in order by this same rule,
    so the answer is a function of the history and the config alone, the same on a re-run,
    and a changed threshold applies to the past as well.

    A metric is flagged when its change against the window's median is past
    max(threshold, spread), spread = SPREAD_SDS · 1.4826 · MAD / |median| (:func:`_flag`).
    Nothing is flagged for a deployment with fewer than ``rule.min_history_dates`` earlier
    dates of its own: a median of one or two days is one or two noisy days.

    ``check`` is the report's ``regression_check``: ``status`` is ``checked`` when at least
    one deployment of the date had ``needed`` earlier dates, else ``insufficient_history``;
    ``earlier_dates`` is the most any deployment had (at most ``window_days``);
    ``not_checked`` lists the deployments that had too few; ``accepted_since`` maps each
    deployment whose ``accept_since`` is in effect on ``date`` to it.
    """
    nightly = nightly or Nightly()
    needed, window_days = rule.min_history_dates, rule.window_days
    known = history.filter(pl.col("date") <= date)
    check: dict[str, Any] = {"status": "insufficient_history", "earlier_dates": 0, "needed": needed,
                             "window_days": window_days, "not_checked": [], "accepted_since": {}}
    flagged: list[dict] = []
    usable_counts = [0]
    for deployment in known.filter(pl.col("date") == date).get_column("deployment_id").sort().to_list():
        own = known.filter(pl.col("deployment_id") == deployment)
        since = nightly.accepted_from(deployment)
        if since is not None and since <= date:
            own = own.filter(pl.col("date") >= since)
            check["accepted_since"][deployment] = since.isoformat()
        own = own.sort("date")
        earlier = own.height - 1
        usable_counts.append(min(earlier, window_days))
        if earlier < needed:
            entry = {"deployment_id": deployment, "earlier_dates": earlier}
            if deployment in check["accepted_since"]:
                entry["accepted_since"] = check["accepted_since"][deployment]
            check["not_checked"].append(entry)
            continue
        dates = [d.isoformat() for d in own.get_column("date").to_list()]
        for metric, (threshold_key, direction) in CHECKED.items():
            today = replay(dates, own.get_column(metric).to_list(), needed, window_days,
                           getattr(rule, threshold_key), direction)[-1]
            if today:
                flagged.append({"deployment_id": deployment, "metric": metric, **today})
    check["earlier_dates"] = max(usable_counts)
    if check["earlier_dates"] >= needed:
        check["status"] = "checked"
    else:
        # nothing was compared: naming every deployment as left out would only repeat the status
        check["not_checked"] = []
    return check, flagged


def replay(dates: list[str], values: list[float | None], needed: int, window_days: int, threshold: float,
           direction: str) -> list[dict | None]:
    """One deployment's metric judged date by date in order: the flag entry of each date, or None.

    ``dates`` are ascending ISO dates, ``values`` the metric on them. A date is judged
    against the latest ``window_days`` earlier dates that were not flagged themselves;
    the first ``needed`` dates have too few earlier ones and are never flagged. A flag on
    the date right after a flagged one continues it: ``flagged_since`` is the first date
    of the unbroken run.
    """
    judged: list[dict | None] = []
    unflagged: list[int] = []
    for i, value in enumerate(values):
        found = None
        if i >= needed:
            window = unflagged[-window_days:]
            found = _flag(value, [values[j] for j in window if values[j] is not None], needed, threshold, direction)
        if found:
            previous = judged[i - 1] if i else None
            found |= {
                "window_dates": [dates[j] for j in window],
                # the flagged dates the window reached past: without them it would be later dates
                "excluded_flagged_dates": [dates[j] for j in range(window[0], i) if judged[j] is not None],
                "flagged_since": previous["flagged_since"] if previous else dates[i],
            }
        else:
            unflagged.append(i)
        judged.append(found)
    return judged


def _flag(value: float | None, window: list[float], needed: int, threshold: float, direction: str) -> dict | None:
    """The regression entry when ``value`` is past max(threshold, spread) in ``direction``, else None."""
    # A metric null on some earlier days (a baseline's accept length, a day without TPOT)
    # needs as many real values as the deployment needs dates.
    if value is None or len(window) < needed:
        return None
    baseline = statistics.median(window)
    if baseline == 0:
        return None
    change = (value - baseline) / baseline
    spread = robust_spread(window, baseline)
    limit = max(threshold, spread)
    if (direction == "drop" and change < -limit) or (direction == "rise" and change > limit):
        return {"value": value, "baseline": baseline, "change": change, "spread": spread, "limit": limit}
    return None


def robust_spread(window: list[float], baseline: float) -> float:
    """SPREAD_SDS · 1.4826 · MAD / |baseline|, MAD = the median of |value − baseline| over the window."""
    mad = statistics.median(abs(v - baseline) for v in window)
    return SPREAD_SDS * MAD_TO_SD * mad / abs(baseline)
