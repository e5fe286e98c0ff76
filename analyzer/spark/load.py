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

import json
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

import duckdb
import pyarrow as pa

from ..analysis import portable
from ..errors import EnvironmentProblem, InputProblem, InternalError, first_line
from ..ingest import rules
from ..ingest.load import (DEPENDENT_TABLES, LoadSummary, RoundsInPlace, StructuralError, TableFiles,
                           check_structure, discover, entry_notes, link_key_checks, partition_values,
                           rows_without_uid_sql, table_plan, uncastable, unknown_entries, unreadable_file,
                           written_links)
from ..ingest.schema import TABLE_ORDER, load_schemas
from .session import materialize, spark_failure

Progress = Callable[[str], None]

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(traces: str | Path) -> bool:
    return bool(_URI.match(str(traces)))


class RoundsBreakRules(Exception):
    """Rounds read in place break a rule that reads other rows (``confirm_in_place``): the
    caller loads again, the rounds classified row by row (``rounds_in_place=False``)."""


def load_on_spark(spark, traces: str | Path, *, date: str | None = None, progress: Progress | None = None,
                  hashed_links: frozenset[str] = frozenset(), check_rounds: bool = True,
                  rounds_in_place: bool = False) -> LoadSummary:
    """Build the clean tables as temporary views of ``spark``, with ``rejected_rows``,
    ``trace_tables`` and ``trace_columns``; return the load summary. The link keys a
    writer stored are used unless ``hashed_links`` names them, and checked on the parents
    (on the rounds too with ``check_rounds``; else the heavy pass checks them).

    With ``rounds_in_place`` the rounds are read as the DuckDB engine reads them for a
    report (``ingest.load.read_in_place``): a view over the files, not a classified copy,
    as long as one pass finds no round breaking a rule that reads the row alone. The rules
    that read other rows are then counted off the heavy pass's aggregates
    (``confirm_in_place``; ``summary.pending`` says they are still to count). A classified
    copy of the rounds costs three joins to their parents and a write of every round, most
    of a small report's time on Spark."""
    say = progress or (lambda _msg: None)
    traces = str(traces)
    if is_uri(traces):
        found = _discover_uri(spark, traces, date, say)
        check_structure(None, found, cast_check=lambda *a: _spark_cast_check(spark, *a), traces=traces)
        notes = entry_notes(traces, [(str(s.getPath().getName()), s.isDirectory()) for s in _listing(spark, traces)])
    else:
        found = discover(Path(traces), date=date)
        say("checking structure")
        with duckdb.connect() as con:
            check_structure(con, found, traces=traces)
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
    without_uid: dict[str, int] = {}
    rejected_frames = []
    clean_frames = {}
    # Every table's rules are applied before any clean table replaces a name: unknown_*
    # reads the parents as read (_raw_<parent>), round_out_of_order the clean steps (_clean_steps).
    pending = None
    for table in TABLE_ORDER:
        schema, plan = schemas[table], plans[table]
        if table == "rounds" and rounds_in_place and found[table].present:
            say("reading rounds in place: counting row-rule breaks")
            sql = portable.spark_sql(rules.row_pass_sql(schema, plan, f"_raw_{table}"))
            counted = _read_or_name_the_file(lambda: _sql(spark, sql, found[table]).collect()[0].asDict(),
                                              traces, found)
            rows_read[table] = counted.pop("rows")
            missing = {uid: counted.pop(rules.rows_without_uid_column(uid)) for uid in plan.written_links}
            breaking = {reason: n for reason, n in counted.items() if n}
            if not breaking:
                without_uid.update({uid: n for uid, n in missing.items() if n})
                rejected[table], rows_clean[table] = {}, rows_read[table]
                clean_frames[table] = spark.table(f"_raw_{table}")
                pending = RoundsInPlace(found, plan)
                continue
            say("rounds break a row rule (" + ", ".join(f"{r} {n}" for r, n in breaking.items())
                + "): classifying every round")
        say(f"applying row rules to {table}")
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
    for table in TABLE_ORDER:
        if table == "rounds" and pending is not None:
            continue        # counted by the rounds' row pass
        sql = rows_without_uid_sql(schemas[table], plans[table], f"_raw_{table}")
        if sql:
            counts = spark.sql(portable.spark_sql(sql)).collect()[0]
            for uid, n in zip(sorted(rules.rows_without_uid_conditions(schemas[table], plans[table])), counts):
                without_uid[uid] = without_uid.get(uid, 0) + n
    summary = LoadSummary(rows_read, rows_clean, {t: found[t].present for t in TABLE_ORDER}, rejected,
                          notes=notes + link_notes, found=found, written_links=written,
                          rows_without_uid=without_uid)
    summary.pending = pending
    check_spark_link_keys(spark, summary, rounds=check_rounds)
    return summary


def confirm_in_place(spark, summary: LoadSummary, aggregates: rules.RoundAggregates,
                     progress: Progress | None = None) -> None:
    """The rules of rounds read in place that read other rows, counted off ``aggregates``
    (the heavy pass's request_rounds and step_rounds) as the DuckDB engine counts them
    (``ingest.load.in_place_counts``), against every parent as read. ``RoundsBreakRules``
    when some count is not zero."""
    pending, summary.pending = summary.pending, None
    if pending is None:
        return
    schema = load_schemas()["rounds"]
    parents = {ref.table: f"_raw_{ref.table}" for ref in schema.references}
    witnesses = [rules.in_place_witness_sql(schema, pending.plan, rule, aggregates, parents)
                 for rule in rules.table_rules(schema, pending.plan) if rule.reads != "row"]
    if not witnesses:
        return
    # one job: each rule's count as a column
    sql = "select " + ", ".join(f"({w}) as c{i}" for i, w in enumerate(witnesses))
    counts = spark.sql(portable.spark_sql(sql)).collect()[0]
    reasons = [rule.reason for rule in rules.table_rules(schema, pending.plan) if rule.reads != "row"]
    breaking = {reason: n for reason, n in zip(reasons, counts) if n}
    if breaking:
        if progress:
            progress("rounds may break a rule that reads other rows (" + ", ".join(
                f"{r} {n}" for r, n in breaking.items()) + "): classifying every round")
        raise RoundsBreakRules(breaking)


def _read_or_name_the_file(run, traces: str, found: dict[str, TableFiles]):
    """``run()``; when it fails on a local trace, the file that cannot be decoded is named
    as the DuckDB engine names it (a structural error, exit 2). Otherwise the failure
    is not the input's (exit 3)."""
    try:
        return run()
    except Exception as exc:
        failure = spark_failure(exc)
        if failure is not None:         # the cluster's, not the file's
            raise failure from None
        if not is_uri(traces):
            with duckdb.connect() as con:
                for entry in found.values():
                    culprit = unreadable_file(con, entry)
                    if culprit is not None:
                        raise StructuralError(culprit, entry.table, None,
                                              f"not readable Parquet ({first_line(exc)})") from None
        raise EnvironmentProblem(f"Spark failed reading {traces}: {first_line(exc)}") from None


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

    Each group of ``read_groups`` is one read; groups are unioned by name, so a column
    missing from some files is null there, as DuckDB's union_by_name reads it.
    """
    groups = read_groups(entry)
    if not groups:
        return None
    root = _table_root(traces, entry)
    frame = None
    for paths in groups:
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


def read_groups(entry: TableFiles) -> list[list[str]]:
    """The table's files as Spark reads them: qualified (``qualified``), in groups of the
    same columns and types, one ``spark.read.parquet`` each."""
    groups: dict[tuple, list[str]] = {}
    for path in entry.files:
        groups.setdefault(columns_and_types(entry.file_schemas[path]), []).append(qualified(path))
    return list(groups.values())


def columns_and_types(schema: pa.Schema) -> tuple:
    """What decides whether files can be read together: the columns and their types, not
    the key-value metadata (pandas stores each file's row count there)."""
    return tuple((f.name, str(f.type)) for f in schema)


def qualified(path: str | Path) -> str:
    """``path`` as a URI the executors resolve alike: an unqualified path would resolve
    against fs.defaultFS (HDFS on YARN), not the driver's disk. Not ``Path.as_uri()``:
    Hadoop's Path reads the text unescaped, so %20 would name a file called %20."""
    if is_uri(path):
        return str(path)
    return "file://" + str(Path(path).absolute())


def _table_root(traces: str, entry: TableFiles) -> str | None:
    """The folder partitions are read below (``TRACES/<table>``), or None for one file."""
    if not entry.partitions:
        return None
    return f"{qualified(traces).rstrip('/')}/{entry.table}"


# ----------------------------------------------------------------------------- URIs


def _discover_uri(spark, traces: str, date: str | None, say: Progress) -> dict[str, TableFiles]:
    """``ingest.load.discover`` for a URI: the files listed by Hadoop's FileSystem (so
    object storage uses Spark's own credentials), their footers read by ``_footer_schemas``.

    The listing is ``FileSystem.listFiles(folder, recursive)``, not the file index of
    ``spark.read.parquet(folder)``: on an object store it is one flat, paged listing of
    the prefix (no request per partition folder), it needs no valid Spark partition
    layout (the structure checks give their own messages), and its statuses carry each
    file's length, so reading a footer costs no extra request."""
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
        statuses = {}
        if fs.exists(single) and fs.exists(folder):
            raise StructuralError(traces, table, None,
                                  f"both {table}.parquet and {table}/ exist; expected one of them")
        if fs.exists(single) and fs.getFileStatus(single).isFile():
            paths = [str(single.toUri())]
            statuses[paths[0]] = fs.getFileStatus(single)
            entry.file_partitions[paths[0]] = {}
        elif fs.exists(folder):
            for status in _listing(spark, str(folder.toUri()), recursive=True):
                uri = str(status.getPath().toUri())
                if uri.endswith(".parquet") and not status.getPath().getName().startswith(("_", ".")):
                    paths.append(uri)
                    statuses[uri] = status
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
        schemas = _footer_schemas(spark, [statuses[p] for p in paths])
        for path, schema in zip(paths, schemas):
            if isinstance(schema, Exception):
                raise StructuralError(path, table, None, f"not readable Parquet ({first_line(schema)})")
            entry.file_schemas[path] = schema
            entry.files.append(path)
            for key in entry.file_partitions[path]:
                if key not in entry.partitions:
                    entry.partitions.append(key)
        found[table] = entry
    if date is not None and not any("date" in p for e in found.values() for p in e.file_partitions.values()):
        raise InputProblem(f"{traces}: no table is partitioned by date= (folders such as rounds/date={date}/), "
                           f"so --date {date} cannot select a day")
    return found


def _footer_schemas(spark, statuses: list) -> list:
    """Each file's schema (Arrow, as Spark reads the file), or the exception reading its
    footer raised. The footers are read by the JVM's parquet-hadoop, on the driver, from
    a pool of threads: no Spark job per file (each one cost 0.1-0.9 s), and object-store
    latency is overlapped. Spark's own converter (with the session's settings, and the
    schema Spark wrote into its own files) decides the types, as ``spark.read`` would."""
    from concurrent.futures import ThreadPoolExecutor

    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    parquet = jvm.org.apache.spark.sql.execution.datasources.parquet
    converter = parquet.ParquetToSparkSchemaConverter(spark._jsparkSession.sessionState().conf())
    no_filter = jvm.org.apache.parquet.format.converter.ParquetMetadataConverter.NO_FILTER

    def read(status):
        try:
            meta = jvm.org.apache.parquet.hadoop.ParquetFileReader.readFooter(conf, status, no_filter)
            footer = jvm.org.apache.parquet.hadoop.Footer(status.getPath(), meta)
            struct = StructType.fromJson(json.loads(parquet.ParquetFileFormat.readSchemaFromFooter(
                footer, converter).json()))
            return to_arrow_schema(struct, timezone="UTC")
        except Exception as exc:     # py4j's error: the JVM's own message says what is wrong
            java = getattr(exc, "java_exception", None)
            return RuntimeError(str(java.getMessage())) if java is not None else exc

    if not statuses:
        return []
    with ThreadPoolExecutor(min(16, len(statuses))) as pool:
        return list(pool.map(read, statuses))


def _spark_cast_check(spark, paths: list[str], table: str, column: str, declared: str, arrow_type) -> None:
    """``ingest.load``'s uncastable-value check, as one Spark job over ``paths``: the
    first offending file by path, as the DuckDB engine's file-by-file check finds it."""
    view = "_specan_cast_check"
    spark.read.parquet(*[qualified(p) for p in paths]).selectExpr(
        f"`{column}`", "_metadata.file_path as _specan_file").createOrReplaceTempView(view)
    sql = rules.uncastable_value_sql(column, declared, file_column="_specan_file").replace("read_parquet(?)", view)
    try:
        bad = spark.sql(portable.spark_sql(sql)).collect()
    except Exception as exc:
        raise StructuralError(paths[0], table, column,
                              f"expected {declared}, found {arrow_type} ({first_line(exc)})") from None
    if bad:
        value, file = bad[0]
        # Spark may spell the URI otherwise (file:/x for file:///x): the path names the file
        named = next((p for p in paths if urlparse(str(p)).path == urlparse(file).path), file)
        raise uncastable(named, table, column, declared, arrow_type, value)


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
        files = [str(s.getPath().toUri()) for s in _listing(spark, f"{traces.rstrip('/')}/import_notes", recursive=True)
                 if str(s.getPath().getName()).endswith(".parquet")]
    else:
        folder = Path(traces) / "import_notes"
        files = [qualified(f) for f in sorted(folder.rglob("*.parquet"))] if folder.is_dir() else []
    if files:
        spark.read.parquet(*sorted(files)).createOrReplaceTempView("import_notes")
    else:   # an earlier run's on this session would be read as these traces' notes
        spark.catalog.dropTempView("import_notes")


def _listing(spark, uri: str, recursive: bool = False) -> list:
    """The FileStatus of each entry of the folder ``uri`` (its files, with ``recursive``;
    nothing when there is no such folder), through Hadoop's FileSystem."""
    jvm = spark.sparkContext._jvm
    folder = jvm.org.apache.hadoop.fs.Path(uri)
    fs = folder.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not (fs.exists(folder) and fs.getFileStatus(folder).isDirectory()):
        return []
    if not recursive:
        return list(fs.listStatus(folder))
    listing, found = fs.listFiles(folder, True), []
    while listing.hasNext():
        found.append(listing.next())
    return found


def check_spark_link_keys(spark, summary: LoadSummary, aggregates=None, rounds: bool = True) -> None:
    """``ingest.load.check_link_keys`` on Spark: the parents as read are the classified
    ``_raw_<table>`` views; the rounds are checked off ``aggregates`` (the heavy views),
    or off the clean rounds for written link keys, unless ``rounds`` is false."""
    def fetch(sql: str):
        rows = spark.sql(portable.spark_sql(sql)).collect()
        return tuple(rows[0]) if rows else None

    link_key_checks(fetch, summary.found, lambda parent: f"_raw_{parent}", aggregates,
                    written=summary.written_links, rows_without_uid=summary.rows_without_uid, rounds=rounds)
