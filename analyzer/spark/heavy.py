"""The heavy pass on Spark, and what it brings back.

Which views are heavy, and which of them come back, is declared in
``sql/scaleout.toml``; the views themselves are the ``sql/`` files, transpiled
(``analysis.portable``). Nothing here restates a metric.

What comes back ("the reduced traces") is the fetched heavy views plus the
deployments, a few of the rejected rows and the metadata tables: its size is bounded
by the deployments, buckets, categories and request groups, not by the requests,
rounds or intervals. ``fetch`` brings them to the driver as Arrow; ``write`` has Spark
write them as Parquet (any path Spark can write, object storage included) for a
later ``specan report DIR`` on a laptop.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pyarrow as pa

from ..analysis import buckets, portable
from ..analysis.partitions import request_partitions_sql
from ..analysis.views import DEFAULT_REPEAT_N, ROUND_AGGREGATES, dependency_order, discover_views, scaleout_split
from ..errors import EnvironmentProblem, InternalError, first_line
from ..ingest import rules
from ..ingest.load import LoadSummary
from .load import check_spark_link_keys, confirm_in_place
from .session import materialize, spark_error_text, spark_failure

Progress = Callable[[str], None]

# The marker of a reduced trace directory, with what the report needs besides the tables.
MANIFEST = "_specan_reduced.json"
FORMAT_VERSION = 1


def create_relations(spark) -> None:
    """The relations the heavy views read besides the tables and each other, from the
    Python text the DuckDB engine creates them with: the ``buckets`` seed, each request's
    partition values (``request_partitions``) and the slice relations, empty (``--by``
    slices on the DuckDB engine only)."""
    columns = [r[0] for r in spark.sql("select column_name from trace_columns where table_name = 'requests' "
                                       "and `partition` order by column_name").collect()]
    relations = {
        "buckets": buckets.relation_sql(),
        "request_partitions": request_partitions_sql(columns),
        "slice_columns": "select cast(null as varchar) as slice_column, cast(null as integer) as position "
                         "from deployments where false",
        "request_slices": "select deployment_id, request_uid, cast(null as varchar) as slice_column, "
                          "cast(null as varchar) as slice_value from requests where false",
    }
    for name, sql in relations.items():
        spark.sql(portable.spark_sql(sql)).createOrReplaceTempView(name)


def run_heavy_pass(spark, summary: LoadSummary, progress: Progress | None = None, config=None,
                   repeat_n: int = DEFAULT_REPEAT_N) -> dict:
    """Create every heavy view on ``spark`` (the clean tables must be there); return the
    fetched ones as DataFrames, without the columns that stay on the cluster. The views
    read ``config``'s thresholds (the requests to look at are listed on the cluster)."""
    say = progress or (lambda _msg: None)
    views, split = discover_views(), scaleout_split()
    known = portable.spark_macros(repeat_n, config)
    kept = kept_views(views, split)
    create_relations(spark)
    for name in dependency_order(views):
        if name not in split.heavy:
            continue
        view = views[name]
        local = sorted((view.references & views.keys()) - split.heavy - {name})
        if local:
            raise InternalError(f"sql/scaleout.toml: heavy view {name} reads {', '.join(local)}, "
                                "which is not heavy")
        try:
            frame = spark.sql(portable.spark_sql(view.sql, known))
            if name in split.empty_unless and not spark.sql(portable.spark_sql(split.empty_unless[name])).take(1):
                frame = frame.limit(0)      # an empty relation: Spark plans no scan for it
        except Exception as exc:
            failure = spark_failure(exc)
            if failure is not None:
                raise failure from None
            raise InternalError(f"{view.path}: Spark cannot run view {name}: {spark_error_text(exc)}") from None
        if name in kept:
            say(f"computing {name} on Spark")
            frame = materialize(frame)
        frame.createOrReplaceTempView(name)
    # rounds read in place: the rules that read other rows, off the aggregates (else the
    # caller loads again with the rounds classified), then one id per uid among the rounds,
    # and written link keys that name each round's parent
    confirm_in_place(spark, summary, ROUND_AGGREGATES, progress)
    check_spark_link_keys(spark, summary, ROUND_AGGREGATES)
    return {name: spark.table(name).drop(*columns) for name, columns in split.fetched.items()}


def kept_views(views: dict, split) -> set[str]:
    """The heavy views Spark computes once and keeps: those used twice or more, by heavy
    views that read them or by the fetch that brings them back. Spark computes a view
    again in every job that reads it (matched_units once for each of the four matched_*
    tables, request_acceptance for each of its four readers), where DuckDB reads its
    tables within one process; kept once, each reader scans the result. A view used once
    is not kept, materialised in DuckDB or not: keeping it costs a job of its own (about
    0.5 s on a small trace) and a write of its rows, before the one job that reads it
    (cost_model, matched_sums, round_cells: computed only to be brought back)."""
    uses = {name: int(name in split.fetched) for name in split.heavy}
    for name in split.heavy:
        for ref in views[name].references & uses.keys():
            if ref != name:
                uses[ref] += 1
    return {name for name, n in uses.items() if n >= 2}


def reduced_frames(spark, summary: LoadSummary, progress: Progress | None = None, config=None,
                   repeat_n: int = DEFAULT_REPEAT_N) -> dict:
    """Everything the local finish reads, as DataFrames: the fetched heavy views and the
    deployments and metadata tables. The requests and intervals stay on the cluster: the
    views that read them are heavy."""
    frames = run_heavy_pass(spark, summary, progress, config, repeat_n)
    frames["deployments"] = spark.table("deployments")
    for name in rules.VERSIONS["deployments"]:
        frames[name] = spark.table(name)
    for name in ("rejected_rows", "trace_tables", "trace_columns", "import_notes"):
        if spark.catalog.tableExists(name):
            frames[name] = spark.table(name)
    return frames


def fetch(frames: dict, progress: Progress | None = None) -> dict[str, pa.Table]:
    """The reduced tables on the driver, as Arrow, with timestamps as DuckDB's TIMESTAMP."""
    return {name: collect(frame, name, progress) for name, frame in frames.items()}


def collect(frame, name: str, progress: Progress | None = None) -> pa.Table:
    """One reduced table on the driver, as Arrow."""
    if progress:
        progress(f"bringing back {name}")
    return _naive_timestamps(frame.toArrow())


def _naive_timestamps(table: pa.Table) -> pa.Table:
    """Spark's timestamps arrive as UTC instants; the traces' are naive UTC (TIMESTAMP)."""
    fields = [pa.field(f.name, pa.timestamp("us"), f.nullable)
              if pa.types.is_timestamp(f.type) and f.type.tz is not None else f for f in table.schema]
    return table.cast(pa.schema(fields)) if fields != list(table.schema) else table


def write(spark, frames: dict, out: str, summary: LoadSummary, progress: Progress | None = None) -> dict[str, int]:
    """Write the reduced tables under ``out`` (one Parquet folder each) and the manifest
    last, so a directory with a manifest is complete. Returns rows written per table."""
    base = out.rstrip("/")
    _delete(spark, f"{base}/{MANIFEST}")    # an earlier run's: DIR is incomplete until the new one
    rows = {}
    for name, frame in frames.items():
        rows[name] = write_frame(frame, f"{base}/{name}", progress)
    manifest = {"format": "specan-reduced", "version": FORMAT_VERSION, "tables": sorted(frames),
                "notes": summary.notes, "rows": rows}
    _write_text(spark, f"{base}/{MANIFEST}", json.dumps(manifest, indent=2) + "\n")
    return rows


def write_frame(frame, uri: str, progress: Progress | None = None) -> int:
    """``frame`` written by the executors as Parquet at ``uri`` (replaced); its rows, counted
    from what was written."""
    if progress:
        progress(f"writing {uri}")
    try:
        frame.write.mode("overwrite").parquet(uri)
    except Exception as exc:
        raise EnvironmentProblem(f"cannot write {uri}: {first_line(exc)}") from None
    return frame.sparkSession.read.parquet(uri).count()


def _delete(spark, uri: str) -> None:
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    try:
        path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(path, False)
    except Exception as exc:
        raise EnvironmentProblem(f"cannot write {uri}: {first_line(exc)}") from None


def _write_text(spark, uri: str, text: str) -> None:
    """One small file, through Hadoop's FileSystem (the same credentials as the Parquet)."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    try:
        stream = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).create(path, True)
        stream.write(bytearray(text.encode("utf-8")))
        stream.close()
    except Exception as exc:
        raise EnvironmentProblem(f"cannot write {uri}: {first_line(exc)}") from None
