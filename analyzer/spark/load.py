"""Read a trace directory on Spark and apply the row rules there.

The same contract as the DuckDB engine (``analyzer.ingest.load``), from the same
code where it can be:

- Discovery and the structure checks are ``ingest.load``'s for a local path, so a
  structural error is the same one-line message and exit 2 on both engines. For a
  URI (``s3a://``, ``gs://``, ``hdfs://``, ``file://``) the files are listed through
  Hadoop's FileSystem, with the credentials of Spark's own configuration, and each
  footer is read by Spark.
- The raw select and the row rules are ``ingest.rules``' SQL, transpiled
  (``analysis.portable.spark_sql``): the rules' one definition,
  ``rules.classification_sql``, evaluated on Spark. Each table is one classified
  relation: the clean rows and the rejected ones are two filters of it.

The clean tables end as temporary views of the session, named as in DuckDB.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa

from ..analysis import portable
from ..errors import EnvironmentProblem, InputProblem, InternalError, first_line
from ..ingest import rules
from ..ingest.load import (DEPENDENT_TABLES, LoadSummary, StructuralError, TableFiles, check_structure, discover,
                           link_key_checks, partition_values, rows_without_uid_sql, table_plan, uncastable,
                           unknown_entries, unreadable_file, written_links)
from ..ingest.schema import TABLE_ORDER, load_schemas

Progress = Callable[[str], None]

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(traces: str | Path) -> bool:
    return bool(_URI.match(str(traces)))


def load_on_spark(spark, traces: str | Path, *, date: str | None = None, progress: Progress | None = None,
                  hashed_links: frozenset[str] = frozenset(), check_rounds: bool = True) -> LoadSummary:
    """Build the clean tables as temporary views of ``spark``, with ``rejected_rows``,
    ``trace_tables`` and ``trace_columns``; return the load summary. The link keys a
    writer stored are used unless ``hashed_links`` names them, and checked on the parents
    (on the rounds too with ``check_rounds``; else the heavy pass checks them)."""
    say = progress or (lambda _msg: None)
    traces = str(traces)
    if is_uri(traces):
        found = _discover_uri(spark, traces, date, say)
        check_structure(None, found, cast_check=lambda *a: _spark_cast_check(spark, *a))
        notes: list[str] = []
    else:
        found = discover(Path(traces), date=date)
        say("checking structure")
        with duckdb.connect() as con:
            check_structure(con, found)
        notes = unknown_entries(Path(traces))
    schemas = load_schemas()
    written, link_notes = written_links(found, hashed_links)
    plans = {t: table_plan(found[t], schemas[t], found, written) for t in TABLE_ORDER}

    for table in TABLE_ORDER:
        say(f"reading {table} ({len(found[table].files)} file{'s' if len(found[table].files) != 1 else ''})")
        source = _register_files(spark, traces, found[table])
        raw = portable.spark_sql(rules.raw_select_sql(schemas[table], plans[table], source))
        _sql(spark, raw, found[table]).createOrReplaceTempView(f"_raw_{table}")

    rows_read: dict[str, int] = {}
    rows_clean: dict[str, int] = {}
    rejected: dict[str, dict[str, int]] = {}
    rejected_frames = []
    clean_frames = {}
    # Every table's rules are applied before any clean table replaces a name: unknown_*
    # reads the parents as read (_raw_<parent>), round_out_of_order the clean steps (_clean_steps).
    for table in TABLE_ORDER:
        say(f"applying row rules to {table}")
        schema, plan = schemas[table], plans[table]
        inputs = rules.RuleInputs(rows=f"_raw_{table}",
                                  parents={ref.table: f"_raw_{ref.table}" for ref in schema.references},
                                  clean={t: f"_clean_{t}" for t in clean_frames})
        classified = _sql(spark, portable.spark_sql(rules.classification_sql(schema, plan, inputs)), found[table])
        classified = _read_or_name_the_file(lambda: materialize(classified), traces, found)
        counts = {reason: n for reason, n in classified.groupBy("_reason").count().collect()}
        rows_read[table] = sum(counts.values())
        rejected[table] = dict(sorted((r, n) for r, n in counts.items() if r is not None))
        columns = [c for c in spark.table(f"_raw_{table}").columns]
        clean = classified.where("_reason is null").select(*columns)
        if schema.merge_identical_rows:
            # each partition's version and the latest one, as in DuckDB (rules.versions_sql)
            classified.createOrReplaceTempView(f"_classified_{table}")
            for name, select in rules.versions_sql(schema, plan, f"_classified_{table}").items():
                frame = materialize(spark.sql(portable.spark_sql(select)))
                frame.createOrReplaceTempView(name if name != table else f"_clean_{table}")
            clean = spark.table(f"_clean_{table}")
            rows_clean[table] = clean.count()
        else:
            rows_clean[table] = counts.get(None, 0)
        clean_frames[table] = clean
        clean.createOrReplaceTempView(f"_clean_{table}")
        # Spark writes a year beyond 9999 as '+294247-…', DuckDB as '294247-…': the key text is one
        rejected_frames.append(classified.where("_reason is not null").selectExpr(
            f"'{table}' as table_name", r"regexp_replace(_row_key, '=\\+([0-9]{5,}-)', '=$1') as row_key",
            "_reason as reason"))
    for table, frame in clean_frames.items():
        frame.createOrReplaceTempView(table)
    union = rejected_frames[0]
    for frame in rejected_frames[1:]:
        union = union.unionByName(frame)
    union.createOrReplaceTempView("rejected_rows")

    _versions, conflicts = rules.VERSIONS["deployments"]
    counted = spark.sql(portable.spark_sql(rules.conflict_rows_sql(
        plans, DEPENDENT_TABLES, any_conflict=spark.table(conflicts).count() > 0)))
    materialize(counted).createOrReplaceTempView(conflicts)
    _metadata_views(spark, found, schemas, rows_read, rows_clean)
    _import_notes(spark, traces)
    without_uid: dict[str, int] = {}
    for table in TABLE_ORDER:
        sql = rows_without_uid_sql(schemas[table], plans[table], f"_raw_{table}")
        if sql:
            counts = spark.sql(portable.spark_sql(sql)).collect()[0]
            for uid, n in zip(sorted(rules.rows_without_uid_conditions(schemas[table], plans[table])), counts):
                without_uid[uid] = without_uid.get(uid, 0) + n
    summary = LoadSummary(rows_read, rows_clean, {t: found[t].present for t in TABLE_ORDER}, rejected,
                          notes=notes + link_notes, found=found, written_links=written,
                          rows_without_uid=without_uid)
    check_spark_link_keys(spark, summary, rounds=check_rounds)
    return summary


def _read_or_name_the_file(run, traces: str, found: dict[str, TableFiles]):
    """``run()``; when it fails on a local trace, the file that cannot be decoded is named
    as the DuckDB engine names it (a structural error, exit 2). Otherwise the failure
    is not the input's (exit 3)."""
    try:
        return run()
    except Exception as exc:
        if not is_uri(traces):
            with duckdb.connect() as con:
                for entry in found.values():
                    culprit = unreadable_file(con, entry)
                    if culprit is not None:
                        raise StructuralError(culprit, entry.table, None,
                                              f"not readable Parquet ({first_line(exc)})") from None
        raise EnvironmentProblem(f"Spark failed reading {traces}: {first_line(exc)}") from None


def materialize(frame):
    """Compute ``frame`` once and keep it on the executors, its plan cut to a scan of
    the result: later queries neither recompute it nor re-analyse its lineage (with
    cache() every query re-plans the rules' joins, about a second per query)."""
    from pyspark import StorageLevel

    return frame.localCheckpoint(eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK)


def _sql(spark, text: str, entry: TableFiles):
    """``spark.sql`` with a failure to read the files turned into a structural error."""
    try:
        return spark.sql(text)
    except Exception as exc:  # pyspark.errors.* (analysis errors carry the SQL's own faults)
        raise InternalError(f"Spark cannot run specan's SQL for table {entry.table}: "
                            f"{first_line(exc)}") from None


# ----------------------------------------------------------------------------- files


def _register_files(spark, traces: str, entry: TableFiles) -> str | None:
    """A temporary view of the table's files unioned by name (None: no files).

    Files with the same footer are read together; groups are unioned by name, so a
    column missing from some files is null there, as DuckDB's union_by_name reads it.
    """
    if not entry.files:
        return None
    groups: dict[str, list] = {}
    for path in entry.files:
        groups.setdefault(str(entry.file_schemas[path]), []).append(str(path))
    root = _table_root(traces, entry)
    frame = None
    for paths in groups.values():
        reader = spark.read
        if root is not None:
            reader = reader.option("basePath", root)
        try:
            part = reader.parquet(*paths)
        except Exception as exc:
            raise StructuralError(paths[0], entry.table, None, f"not readable Parquet ({first_line(exc)})") from None
        frame = part if frame is None else frame.unionByName(part, allowMissingColumns=True)
    name = f"_files_{entry.table}"
    frame.createOrReplaceTempView(name)
    return name


def _table_root(traces: str, entry: TableFiles) -> str | None:
    """The folder partitions are read below (``TRACES/<table>``), or None for one file."""
    if not entry.partitions:
        return None
    return f"{traces.rstrip('/')}/{entry.table}"


# ----------------------------------------------------------------------------- URIs


def _discover_uri(spark, traces: str, date: str | None, say: Progress) -> dict[str, TableFiles]:
    """``ingest.load.discover`` for a URI: the files listed by Hadoop's FileSystem (so
    object storage uses Spark's own credentials), each footer read by Spark."""
    from pyspark.sql.pandas.types import to_arrow_schema

    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    root = jvm.org.apache.hadoop.fs.Path(traces)
    try:
        fs = root.getFileSystem(conf)
        exists = fs.exists(root) and fs.getFileStatus(root).isDirectory()
    except Exception as exc:
        raise InputProblem(f"{traces}: cannot be listed ({first_line(exc)})") from None
    if not exists:
        raise InputProblem(f"{traces}: no such directory")
    base = traces.rstrip("/")
    found = {}
    for table in TABLE_ORDER:
        entry = TableFiles(table)
        single = jvm.org.apache.hadoop.fs.Path(f"{base}/{table}.parquet")
        folder = jvm.org.apache.hadoop.fs.Path(f"{base}/{table}")
        paths: list[str] = []
        if fs.exists(single) and fs.exists(folder):
            raise StructuralError(traces, table, None,
                                  f"both {table}.parquet and {table}/ exist; expected one of them")
        if fs.exists(single) and fs.getFileStatus(single).isFile():
            paths = [str(single.toUri())]
            entry.file_partitions[paths[0]] = {}
        elif fs.exists(folder):
            listing = fs.listFiles(folder, True)
            while listing.hasNext():
                status = listing.next()
                uri = str(status.getPath().toUri())
                if uri.endswith(".parquet") and not status.getPath().getName().startswith(("_", ".")):
                    paths.append(uri)
            paths.sort()
            prefix = str(folder.toUri()).rstrip("/") + "/"
            for path in paths:
                segments = path[len(prefix):].split("/")[:-1] if path.startswith(prefix) else []
                entry.file_partitions[path] = partition_values(segments)
        if date is not None and any("date" in p for p in entry.file_partitions.values()):
            paths = [p for p in paths if entry.file_partitions[p].get("date") == date]
            if not paths:
                raise StructuralError(f"{base}/{table}", table, None, f"no partition date={date}")
        if paths:
            say(f"reading the footers of {len(paths)} {table} file{'s' if len(paths) != 1 else ''}")
        for path in paths:
            try:
                schema = spark.read.parquet(path).schema
                entry.file_schemas[path] = to_arrow_schema(schema, timezone="UTC")
            except Exception as exc:
                raise StructuralError(path, table, None, f"not readable Parquet ({first_line(exc)})") from None
            entry.files.append(path)
            for key in entry.file_partitions[path]:
                if key not in entry.partitions:
                    entry.partitions.append(key)
        # a file's own schema, without the partition columns Spark appended from its path
        for path in entry.files:
            names = [n for n in entry.file_schemas[path].names if n not in entry.file_partitions[path]]
            entry.file_schemas[path] = pa.schema([entry.file_schemas[path].field(n) for n in names])
        found[table] = entry
    if date is not None and not any("date" in p for e in found.values() for p in e.file_partitions.values()):
        raise InputProblem(f"{traces}: no table is partitioned by date= (folders such as rounds/date={date}/), "
                           f"so --date {date} cannot select a day")
    return found


def _spark_cast_check(spark, path: str, table: str, column: str, declared: str, arrow_type) -> None:
    """``ingest.load``'s uncastable-value check, as Spark SQL over one file."""
    view = "_specan_cast_check"
    spark.read.parquet(path).createOrReplaceTempView(view)
    sql = rules.uncastable_value_sql(column, declared).replace("read_parquet(?)", view)
    try:
        bad = spark.sql(portable.spark_sql(sql)).collect()
    except Exception as exc:
        raise StructuralError(path, table, column,
                              f"expected {declared}, found {arrow_type} ({first_line(exc)})") from None
    if bad:
        raise uncastable(path, table, column, declared, arrow_type, bad[0][0])


# ----------------------------------------------------------------------------- metadata


def _metadata_views(spark, found, schemas, rows_read, rows_clean) -> None:
    from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType
    tables = [(t, found[t].present, len(found[t].files), rows_read[t], rows_clean[t]) for t in TABLE_ORDER]
    spark.createDataFrame(tables, StructType([
        StructField("table_name", StringType()), StructField("present", BooleanType()),
        StructField("num_files", IntegerType()), StructField("rows_read", LongType()),
        StructField("rows_clean", LongType())])).createOrReplaceTempView("trace_tables")
    columns = []
    for table in TABLE_ORDER:
        entry, schema = found[table], schemas[table]
        anywhere = entry.columns_anywhere
        columns += [(table, n, True, n in anywhere, n in entry.partitions) for n in schema.column_names]
        columns += [(table, n, False, True, n in entry.partitions) for n in sorted(anywhere - set(schema.column_names))]
    spark.createDataFrame(columns, StructType([
        StructField("table_name", StringType()), StructField("column_name", StringType()),
        StructField("listed", BooleanType()), StructField("present", BooleanType()),
        StructField("partition", BooleanType())])).createOrReplaceTempView("trace_columns")


def _import_notes(spark, traces: str) -> None:
    """TRACES/import_notes/ (what ``specan import`` left), when there is one."""
    if is_uri(traces):
        return
    files = sorted((Path(traces) / "import_notes").rglob("*.parquet")) if (Path(traces) / "import_notes").is_dir() else []
    if files:
        spark.read.parquet(*[str(f) for f in files]).createOrReplaceTempView("import_notes")


def check_spark_link_keys(spark, summary: LoadSummary, aggregates=None, rounds: bool = True) -> None:
    """``ingest.load.check_link_keys`` on Spark: the parents as read are the classified
    ``_raw_<table>`` views; the rounds are checked off ``aggregates`` (the heavy views),
    or off the clean rounds for written link keys, unless ``rounds`` is false."""
    def fetch(sql: str):
        rows = spark.sql(portable.spark_sql(sql)).collect()
        return tuple(rows[0]) if rows else None

    link_key_checks(fetch, summary.found, lambda parent: f"_raw_{parent}", aggregates,
                    written=summary.written_links, rows_without_uid=summary.rows_without_uid, rounds=rounds)
