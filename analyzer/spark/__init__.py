"""The Spark engine (``--engine spark``): the heavy pass runs on a cluster, the small
finish runs locally in DuckDB.

- ``session``: the Spark session (an existing one, or ``--spark-master``).
- ``load``: the trace directory read on Spark, with the same structure checks and
  row rules as the DuckDB engine.
- ``heavy``: the heavy views of ``sql/scaleout.toml`` on Spark, and the reduced
  tables they bring back (to the driver, or written as Parquet).

The local finish (every other view, the cost fit, rendering) is the DuckDB engine's
own code over the reduced tables: ``analyzer.api.open_reduced``.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from ..ingest.load import LoadSummary, with_hashed_fallback
from . import heavy
from .load import is_uri, load_on_spark
from .session import spark_session

Progress = Callable[[str], None]

MANIFEST = heavy.MANIFEST


def validate(traces: str, *, master: str | None = None, date: str | None = None,
             progress: Progress | None = None) -> tuple[LoadSummary, pa.Table]:
    """Load on Spark and apply the row rules: the summary and the rejected rows."""
    spark = spark_session(master)
    summary = with_hashed_fallback(lambda hashed: load_on_spark(
        spark, traces, date=date, progress=progress, hashed_links=hashed), lambda summary: summary, progress)
    return summary, spark.table("rejected_rows").toArrow()


def _load_and_reduce(spark, traces: str, date: str | None, progress: Progress | None):
    """The load and the heavy pass, again with hashed link keys when the written ones are invalid."""
    def run(hashed):
        summary = load_on_spark(spark, traces, date=date, progress=progress, hashed_links=hashed,
                                check_rounds=False)
        return summary, heavy.reduced_frames(spark, summary, progress)

    return with_hashed_fallback(run, lambda result: result[0], progress)


def reduce_traces(traces: str, *, master: str | None = None, date: str | None = None,
                  progress: Progress | None = None) -> tuple[dict[str, pa.Table], LoadSummary]:
    """The heavy pass on Spark; the reduced tables on the driver, as Arrow."""
    spark = spark_session(master)
    summary, frames = _load_and_reduce(spark, traces, date, progress)
    return heavy.fetch(frames, progress), summary


def write_reduced(traces: str, out: str, *, master: str | None = None, date: str | None = None,
                  progress: Progress | None = None) -> tuple[LoadSummary, dict[str, int]]:
    """The heavy pass on Spark, its reduced tables written as Parquet under ``out``."""
    spark = spark_session(master)
    summary, frames = _load_and_reduce(spark, traces, date, progress)
    rows = heavy.write(spark, frames, out, summary, progress)
    return summary, rows


__all__ = ["MANIFEST", "is_uri", "reduce_traces", "spark_session", "validate", "write_reduced"]
