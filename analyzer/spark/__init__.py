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
from dataclasses import dataclass, field

import pyarrow as pa

from ..analysis import portable
from ..analysis.views import DEFAULT_REPEAT_N
from ..ingest import rules
from ..ingest.load import LoadSummary, with_hashed_fallback
from . import heavy
from .load import RoundsBreakRules, is_uri, load_on_spark, qualified
from .session import engine_session, spark_session

Progress = Callable[[str], None]

MANIFEST = heavy.MANIFEST

@dataclass
class Fetched:
    """What came back to the driver: Arrow bytes and rows per table (``--profile``), and
    where the rejected rows went (None: they stayed on the cluster, a few examples came back)."""

    bytes: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    rejected_out: str | None = None
    rejected_total: int = 0

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())


def _rejected_back(spark, summary: LoadSummary, rejected_out: str | None, progress: Progress | None
                   ) -> dict[str, pa.Table]:
    """The rejected rows the driver gets: their counts per (table, reason), from the load,
    and the first ``rules.EXAMPLES_PER_REASON`` of each by row key. With ``rejected_out`` the
    executors write every rejected row there as Parquet first."""
    if rejected_out is not None:     # a local path is the driver's: on YARN it would resolve on HDFS
        heavy.write_frame(spark.table("rejected_rows"), qualified(rejected_out), progress)
    examples = heavy.collect(spark.sql(portable.spark_sql(
        rules.rejected_examples_sql("rejected_rows"))), "rejected_rows", progress)
    counts = [(t, r, n) for t, by_reason in sorted(summary.rejected.items()) for r, n in sorted(by_reason.items())]
    counted = pa.table({"table_name": pa.array([t for t, _, _ in counts], pa.string()),
                        "reason": pa.array([r for _, r, _ in counts], pa.string()),
                        "num_rows": pa.array([n for _, _, n in counts], pa.int64())})
    return {"rejected_rows": examples, "rejected_counts": counted}


def _session(master: str | None, checkpoint_dir: str | None):
    """``engine_session`` with the checkpoint folder as the executors must see it."""
    return engine_session(master, None if checkpoint_dir is None else qualified(checkpoint_dir))


def validate(traces: str, *, master: str | None = None, date: str | None = None,
             progress: Progress | None = None, rejected_out: str | None = None,
             checkpoint_dir: str | None = None) -> tuple[LoadSummary, dict[str, pa.Table], Fetched]:
    """Load on Spark and apply the row rules: the summary, and what comes back of the
    rejected rows (``_rejected_back``)."""
    with _session(master, checkpoint_dir) as spark:
        summary = with_hashed_fallback(lambda hashed: load_on_spark(
            spark, traces, date=date, progress=progress, hashed_links=hashed), lambda summary: summary, progress)
        tables = _rejected_back(spark, summary, rejected_out, progress)
    return summary, tables, _fetched(tables, summary, rejected_out)


def _fetched(tables: dict[str, pa.Table], summary: LoadSummary, rejected_out: str | None) -> Fetched:
    return Fetched({n: t.nbytes for n, t in tables.items()}, {n: t.num_rows for n, t in tables.items()},
                   rejected_out, summary.rejected_total)


def _load_and_reduce(spark, traces: str, date: str | None, progress: Progress | None, config, repeat_n: int):
    """The load and the heavy pass, again with hashed link keys when the written ones are
    invalid. The rounds are read in place; when they break a rule that reads other rows,
    the load and the pass run again with every round classified, as the DuckDB engine
    copies them then."""
    def run(hashed):
        try:
            return once(hashed, in_place=True)
        except RoundsBreakRules:
            return once(hashed, in_place=False)

    def once(hashed, in_place: bool):
        summary = load_on_spark(spark, traces, date=date, progress=progress, hashed_links=hashed,
                                check_rounds=False, rounds_in_place=in_place)
        return summary, heavy.reduced_frames(spark, summary, progress, config, repeat_n)

    return with_hashed_fallback(run, lambda result: result[0], progress)


def reduce_traces(traces: str, *, master: str | None = None, date: str | None = None,
                  progress: Progress | None = None, rejected_out: str | None = None,
                  checkpoint_dir: str | None = None, config=None, repeat_n: int = DEFAULT_REPEAT_N
                  ) -> tuple[dict[str, pa.Table], LoadSummary, Fetched]:
    """The heavy pass on Spark; the reduced tables on the driver, as Arrow. Of the
    rejected rows only their counts and a few examples come back (``_rejected_back``).
    The heavy views read ``config``'s thresholds (``analysis.config.Config``; the defaults
    when None) and ``repeat_n``."""
    with _session(master, checkpoint_dir) as spark:
        summary, frames = _load_and_reduce(spark, traces, date, progress, config, repeat_n)
        del frames["rejected_rows"]
        tables = heavy.fetch(frames, progress)
        tables.update(_rejected_back(spark, summary, rejected_out, progress))
    return tables, summary, _fetched(tables, summary, rejected_out)


def write_reduced(traces: str, out: str, *, master: str | None = None, date: str | None = None,
                  progress: Progress | None = None, checkpoint_dir: str | None = None, config=None,
                  repeat_n: int = DEFAULT_REPEAT_N) -> tuple[LoadSummary, dict[str, int]]:
    """The heavy pass on Spark, its reduced tables written as Parquet under ``out``."""
    with _session(master, checkpoint_dir) as spark:
        summary, frames = _load_and_reduce(spark, traces, date, progress, config, repeat_n)
        rows = heavy.write(spark, frames, qualified(out), summary, progress)
    return summary, rows


__all__ = ["Fetched", "MANIFEST", "engine_session", "is_uri", "reduce_traces", "spark_session", "validate",
           "write_reduced"]
