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

from ..ingest.load import LoadSummary
from . import heavy
from .load import is_uri, load_on_spark
from .session import spark_session

Progress = Callable[[str], None]

MANIFEST = heavy.MANIFEST


def validate(traces: str, *, master: str | None = None, date: str | None = None,
             progress: Progress | None = None) -> tuple[LoadSummary, pa.Table]:
    """Load on Spark and apply the row rules: the summary and the rejected rows."""
    spark = spark_session(master)
    summary = load_on_spark(spark, traces, date=date, progress=progress)
    return summary, spark.table("rejected_rows").toArrow()


def reduce_traces(traces: str, *, master: str | None = None, date: str | None = None,
                  progress: Progress | None = None) -> tuple[dict[str, pa.Table], LoadSummary]:
    """The heavy pass on Spark; the reduced tables on the driver, as Arrow."""
    spark = spark_session(master)
    summary = load_on_spark(spark, traces, date=date, progress=progress)
    return heavy.fetch(heavy.reduced_frames(spark, progress), progress), summary


def write_reduced(traces: str, out: str, *, master: str | None = None, date: str | None = None,
                  progress: Progress | None = None) -> tuple[LoadSummary, dict[str, int]]:
    """The heavy pass on Spark, its reduced tables written as Parquet under ``out``."""
    spark = spark_session(master)
    summary = load_on_spark(spark, traces, date=date, progress=progress)
    rows = heavy.write(spark, heavy.reduced_frames(spark, progress), out, summary, progress)
    return summary, rows


__all__ = ["MANIFEST", "is_uri", "reduce_traces", "spark_session", "validate", "write_reduced"]
