"""Nightly history: one row per (date, deployment_id) of headline metrics, and regression flags.

``history.parquet`` is rewritten whole on every run: written to a temporary
file beside it and renamed over it, so a crash at any point leaves either the
old or the new file, never a torn one. Running a date again replaces that
date's rows and touches no other date.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from pathlib import Path
from typing import Any

import polars as pl

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

# metric -> (config attribute, direction): a drop below -threshold or a rise above +threshold.
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


def read_history(path: Path) -> pl.DataFrame:
    if not path.exists():
        return pl.DataFrame(schema=HISTORY_SCHEMA)
    return pl.read_parquet(path)


def merge(history: pl.DataFrame, day: pl.DataFrame) -> pl.DataFrame:
    """The history with ``day``'s dates replaced by ``day``'s rows; other dates untouched."""
    dates = day.get_column("date").unique().to_list()
    return (pl.concat([history.filter(~pl.col("date").is_in(dates)), day], how="diagonal_relaxed")
            .sort(["date", "deployment_id"]))


def upsert(path: Path, day: pl.DataFrame) -> pl.DataFrame:
    """Replace the rows of ``day``'s date in the history at ``path``; write aside, then rename."""
    merged = merge(read_history(path), day)
    write_atomic(path, merged)
    return merged


def write_atomic(path: Path, merged: pl.DataFrame) -> None:
    """Write to a temporary file in the same directory, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".history-", suffix=".parquet", dir=path.parent)
    os.close(fd)
    try:
        merged.write_parquet(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def regressions(history: pl.DataFrame, date: dt.date, window_days: int, thresholds: dict[str, float]) -> list[dict]:
    """Compare ``date`` with the median of up to ``window_days`` earlier dates, per deployment."""
    today = history.filter(pl.col("date") == date)
    earlier = history.filter(pl.col("date") < date)
    flagged = []
    for row in today.sort("deployment_id").iter_rows(named=True):
        previous = earlier.filter(pl.col("deployment_id") == row["deployment_id"])
        recent_dates = previous.get_column("date").unique().sort(descending=True).head(window_days)
        window = previous.filter(pl.col("date").is_in(recent_dates.to_list()))
        if window.is_empty():
            continue
        for metric, (threshold_key, direction) in CHECKED.items():
            value = row[metric]
            baseline = window.get_column(metric).median()
            if value is None or baseline is None or baseline == 0:
                continue
            change = (value - baseline) / baseline
            limit = thresholds[threshold_key]
            if (direction == "drop" and change < -limit) or (direction == "rise" and change > limit):
                flagged.append({"deployment_id": row["deployment_id"], "metric": metric, "value": value,
                                "baseline": baseline, "change": change})
    return flagged
