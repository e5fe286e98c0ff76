"""The library API behind the CLI: open traces or a loaded database, run queries.

Everything the CLI does goes through these functions, so a notebook can do the
same thing without click:

    >>> from analyzer import api
    >>> with api.open_traces("sample_traces/") as ws:
    ...     accept = ws.frame("select deployment_id, method from accept_length order by deployment_id")
    >>> accept.rows()[:3]
    [('base-bf16', 'none'), ('base-fp8', 'none'), ('eagle-bf16', 'eagle')]

(The examples in docstrings run from the repository root: tests/test_docstrings.py.)
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from .errors import EnvironmentProblem, InputProblem
from .ingest.rules import EXAMPLES_PER_REASON  # noqa: F401  re-exported for the CLI
from .outputs import check_output, output_target, write_output  # noqa: F401  re-exported for the CLI and nightly
from .ingest.load import (LoadSummary, Progress, StructuralError, check_link_keys, confirm_in_place, load_traces,
                          name_unreadable_input, read_summary, with_hashed_fallback)
from .analysis.config import config_toml, load_config  # noqa: F401  re-exported for the CLI
from .analysis.cache_store import DEFAULT_MAX as DEFAULT_CACHE_MAX, default_cache_dir, parse_size  # noqa: F401
from .analysis.pass_cache import CachedPasses, CacheFallback, CacheStats, open_store
from .analysis.slices import resolve_columns
from .analysis.views import (DEFAULT_REPEAT_N, ROUND_AGGREGATES, ViewError, create_local_views, create_views,
                             set_config_thresholds)

ENGINES = ("duckdb", "spark")

DEFAULT_MEMORY_LIMIT = "3GB"
# Databases that `specan load` writes stay readable by the DuckDB CLI users install
# (1.5.x): newer storage features are not used in them.
STORAGE_COMPATIBILITY = "v1.5.0"

_MEMORY_LIMIT = re.compile(r"(\d+(?:\.\d+)?)\s*(b|kb|mb|gb|tb|kib|mib|gib|tib|%)", re.I)


def check_memory_limit(text: str) -> str:
    """``text`` if it is a memory size DuckDB takes (``4GB``, ``512 MiB``, ``80%``), else InputProblem.

    Checked before anything is created, and never pasted into SQL unchecked."""
    match = _MEMORY_LIMIT.fullmatch(text.strip())
    if not match or float(match.group(1)) <= 0 or (match.group(2) == "%" and float(match.group(1)) > 100):
        raise InputProblem(f"--memory-limit {text!r} is not a memory size: expected e.g. 4GB, 512MB or 80%")
    return f"{match.group(1)}{match.group(2).upper() if match.group(2) != '%' else '%'}"


# The private folders this process made and has not removed yet: each is removed by
# whoever made it (remove_temp_dir, even on error), and whatever is left at exit by
# the atexit hook below, so a stop that lands between two statements leaves none.
_LIVE_TEMP_DIRS: set[Path] = set()


def private_temp_dir(temp_dir: str | Path | None = None) -> Path:
    """A folder of this run's own, under ``temp_dir`` (default: TMPDIR), for the scratch
    database and DuckDB's spill files. The caller removes it (``remove_temp_dir``), even
    on error; at the latest it goes when the process exits."""
    base = Path(temp_dir) if temp_dir is not None else Path(tempfile.gettempdir())
    try:
        base.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="specan-", dir=base))
    except OSError as exc:
        raise EnvironmentProblem(f"cannot create a temporary folder under {base}: {exc.strerror or exc}") from None
    _LIVE_TEMP_DIRS.add(folder)
    return folder


def remove_temp_dir(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    _LIVE_TEMP_DIRS.discard(folder)


@atexit.register
def _remove_leftover_temp_dirs() -> None:
    for folder in list(_LIVE_TEMP_DIRS):
        remove_temp_dir(folder)


@dataclass
class Workspace:
    """A DuckDB connection holding clean tables and views, and how they were loaded."""

    con: duckdb.DuckDBPyConnection
    summary: LoadSummary
    workdir: Path | None = None  # this run's private folder (scratch database, spill), removed on close
    # reduced traces (the Spark engine): the relations that stayed on the cluster
    unavailable: tuple[str, ...] = ()
    # the requests columns the slice views are keyed by (--by), as the table spells them
    slices: tuple[str, ...] = ()
    # what the cache of the passes did (pass_cache.CacheStats), when one was asked for
    cache: CacheStats | None = None
    # the Spark engine: what came back to the driver (analyzer.spark.Fetched)
    fetched: object | None = None
    # the cache's writer of a first run's units (pass_cache.CachedPasses.finish): waited for on close
    finish_cache: Callable[[], None] | None = None

    def close(self) -> None:
        if self.finish_cache is not None:
            finish, self.finish_cache = self.finish_cache, None
            finish()
        self.con.close()
        if self.workdir is not None:
            remove_temp_dir(self.workdir)

    # ``with open_traces(...) as ws:`` closes the connection and removes the scratch
    # folder even when a notebook cell fails half-way.
    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def name_unreadable_input(self) -> None:
        """After a failed query: raise the StructuralError naming a trace file whose data pages
        cannot be decoded, if there is one (a query reads the rounds in place)."""
        if self.summary is not None and self.summary.found:
            name_unreadable_input(self.con, self.summary.found)

    def frame(self, sql: str):
        """Run one query over the views; the result as a polars DataFrame (through Arrow:
        DuckDB computes, only the result reaches Python)."""
        return self.con.sql(sql).pl()


def connect(database: str | Path = ":memory:", *, memory_limit: str = DEFAULT_MEMORY_LIMIT,
            spill_dir: Path | None = None, read_only: bool = False,
            storage_compatibility: str | None = None) -> duckdb.DuckDBPyConnection:
    """A connection whose memory is bounded; beyond the limit DuckDB spills to ``spill_dir``."""
    limit = check_memory_limit(memory_limit)
    config = {"storage_compatibility_version": storage_compatibility} if storage_compatibility else {}
    try:
        con = duckdb.connect(str(database), read_only=read_only, config=config)
    except duckdb.IOException as exc:
        raise EnvironmentProblem(f"cannot open database {database}: {str(exc).splitlines()[0]}") from None
    con.execute("set TimeZone = 'UTC'")
    con.execute(f"set memory_limit = '{limit}'")       # checked: digits and a unit only
    threads = os.environ.get("SPECAN_THREADS", "").strip()
    if threads:
        if not threads.isdigit() or int(threads) < 1:
            con.close()
            raise InputProblem(f"SPECAN_THREADS={threads!r} is not a positive whole number")
        con.execute(f"set threads = {int(threads)}")
    if spill_dir is not None:
        con.execute(f"set temp_directory = {_quoted(spill_dir)}")
    return con


def _quoted(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


IN_MEMORY_BYTES = 64 * 2**20
# Traces of at least this many bytes of files get a file-backed scratch database; the
# default is IN_MEMORY_BYTES. Lowered by tests that need the file on small traces
# (docs/commands.md, environment).
FILE_DATABASE_ENV = "SPECAN_FILE_DATABASE_BYTES"


def file_database_bytes() -> int:
    """IN_MEMORY_BYTES, or the whole number of bytes SPECAN_FILE_DATABASE_BYTES gives."""
    text = os.environ.get(FILE_DATABASE_ENV, "").strip()
    if not text:
        return IN_MEMORY_BYTES
    if not text.isdigit():
        raise InputProblem(f"{FILE_DATABASE_ENV}={text!r} is not a whole number of bytes")
    return int(text)


def _total_bytes(traces: str | Path, limit: int) -> int:
    """The size of the trace's files, stopping once it reaches ``limit``."""
    total = 0
    root = Path(traces)
    if root.is_dir():
        for path in root.rglob("*"):
            if path.is_file():
                total += path.stat().st_size
                if total >= limit:
                    break
    return total


def open_traces(traces: str | Path, *, date: str | None = None, memory_limit: str = DEFAULT_MEMORY_LIMIT,
                progress: Progress | None = None, views: bool = True,
                repeat_n: int = DEFAULT_REPEAT_N, temp_dir: str | Path | None = None,
                engine: str = "duckdb", spark_master: str | None = None, by: tuple[str, ...] = (),
                cache: Cache | None = None, rejected_out: str | None = None,
                spark_checkpoint_dir: str | None = None, config=None) -> Workspace:
    """Load a trace directory into a scratch database, with every view unless ``views`` is false.

    The scratch database is a file in this run's private temporary folder, not
    memory: DuckDB compresses its tables and pages them against ``memory_limit``,
    so traces larger than memory load. Traces under ``IN_MEMORY_BYTES`` of files
    (``SPECAN_FILE_DATABASE_BYTES`` moves the bound) use an in-memory database
    instead (it still spills to the folder): a file database pays a log write per
    statement, a third of opening a small trace. The folder is removed on close,
    and by the CLI on a stop signal (SIGINT, SIGTERM, SIGHUP).

    With ``engine="spark"`` the heavy pass runs on Spark (``analyzer.spark``) and the
    workspace holds what it brings back, with every view that can be computed from
    that. A directory written by ``specan load --engine spark --out DIR`` opens the
    same way with the default engine. Of the rejected rows, Spark brings back their
    counts and a few examples per reason (``rejected_rows`` holds those); with
    ``rejected_out`` (a path or URI) its executors write all of them there as Parquet.
    ``Workspace.fetched`` says what came back. The views that list requests run on the
    cluster there, so the ``[anomalies]`` thresholds of ``config`` (a loaded config) apply
    when the traces are read, not when the report is made. ``spark_checkpoint_dir`` keeps the tables
    Spark computes once as reliable checkpoints there (else, on a cluster, as cached
    blocks it recomputes when an executor is lost).

    ``by`` names requests columns to slice by (``report --by``): the views
    ``slice_metrics`` and the others of ``analysis.slices`` are keyed by them. An
    unknown column is an InputProblem naming the columns there are.

    ``cache`` keeps the passes over the rounds per trace unit (a date partition) in
    ``cache.folder``, and reads them back when the unit's files have not changed
    (``analysis.pass_cache``): the same tables, fewer files read. What it did is
    ``Workspace.cache``.
    """
    check_memory_limit(memory_limit)
    if engine not in ENGINES:
        raise InputProblem(f"unknown engine {engine!r}: expected one of {', '.join(ENGINES)}")
    if by and (engine == "spark" or (not _is_uri(traces) and is_reduced(traces))):
        raise InputProblem(_BY_NEEDS_ROUNDS)
    if engine == "spark":
        from . import spark

        if not views:
            summary, tables, fetched = spark.validate(str(traces), master=spark_master, date=date,
                                                      progress=progress, rejected_out=rejected_out,
                                                      checkpoint_dir=spark_checkpoint_dir)
            ws = open_reduced(tables, summary, memory_limit=memory_limit, temp_dir=temp_dir, views=False)
        else:
            tables, summary, fetched = spark.reduce_traces(str(traces), master=spark_master, date=date,
                                                           progress=progress, rejected_out=rejected_out,
                                                           checkpoint_dir=spark_checkpoint_dir, config=config,
                                                           repeat_n=repeat_n)
            ws = open_reduced(tables, summary, memory_limit=memory_limit, temp_dir=temp_dir,
                              repeat_n=repeat_n, progress=progress)
        ws.fetched = fetched
        return ws
    if spark_checkpoint_dir is not None:
        raise InputProblem("--spark-checkpoint-dir is for --engine spark")
    if rejected_out is not None:
        raise InputProblem("--rejected-out is for --engine spark (the DuckDB engine keeps the rejected "
                           "rows in its rejected_rows table)")
    if _is_uri(traces):
        raise InputProblem(f"{traces}: a URI needs --engine spark (the DuckDB engine reads local paths)")
    if is_reduced(traces):
        if date is not None:
            raise InputProblem(f"{traces} holds reduced traces (specan load --engine spark): "
                               "it has no date= partitions to select from")
        return open_reduced_dir(traces, memory_limit=memory_limit, temp_dir=temp_dir, repeat_n=repeat_n,
                                progress=progress)
    return with_hashed_fallback(lambda hashed: _open_cached(
        traces, hashed, date=date, memory_limit=memory_limit, progress=progress, views=views,
        repeat_n=repeat_n, temp_dir=temp_dir, by=by, cache=cache), lambda ws: ws.summary, progress)


@dataclass(frozen=True)
class Cache:
    """Where the passes over the rounds are kept between runs (``--cache-dir``), and the
    most the folder may hold (``--cache-max``, bytes)."""

    folder: Path
    max_bytes: int = parse_size(DEFAULT_CACHE_MAX)


def _open_cached(traces, hashed_links: frozenset[str], *, cache: Cache | None, views: bool, repeat_n: int,
                 progress, **options) -> Workspace:
    """_open_scratch with the cache of the passes when one is asked for and can be used."""
    if cache is None or not views:
        return _open_scratch(traces, hashed_links, views=views, repeat_n=repeat_n, progress=progress, **options)
    store, why = open_store(cache.folder, cache.max_bytes)
    if store is None:
        ws = _open_scratch(traces, hashed_links, views=views, repeat_n=repeat_n, progress=progress, **options)
        ws.cache = CacheStats(folder=str(cache.folder), unused_because=why)
        return ws
    passes = CachedPasses(store, repeat_n, progress)
    try:
        ws = _open_scratch(traces, hashed_links, views=views, repeat_n=repeat_n, progress=progress,
                           passes=passes, **options)
    except CacheFallback as exc:
        passes.abandon()
        if progress:
            progress(f"reading every file without the cache: {exc}")
        ws = _open_scratch(traces, hashed_links, views=views, repeat_n=repeat_n, progress=progress, **options)
        passes.stats.unused_because = str(exc)
    except BaseException:
        passes.abandon()
        raise
    passes.commit()
    ws.cache = passes.stats
    ws.finish_cache = passes.finish        # the writer of a first run's units, joined on close
    return ws


def _open_scratch(traces, hashed_links: frozenset[str], *, date, memory_limit, progress, views, repeat_n,
                  temp_dir, by, passes: CachedPasses | None = None) -> Workspace:
    """open_traces on the DuckDB engine, over the trace files (``passes``: the cache's hooks)."""
    file_from = file_database_bytes()
    workdir = private_temp_dir(temp_dir)
    try:
        database = ":memory:" if _total_bytes(traces, file_from) < file_from else workdir / "scratch.duckdb"
        con = connect(database, memory_limit=memory_limit, spill_dir=workdir / "spill")
    except BaseException:
        remove_temp_dir(workdir)
        raise
    row_pass_hooks = passes
    try:
        # The rounds are read in place when the views are built: their aggregates count the
        # rules that read other rows. Without views (validate) the rounds are copied.
        summary = load_traces(con, traces, date=date, progress=progress, rounds_in_place=views,
                              hashed_links=hashed_links, row_pass=passes)
        slices = resolve_columns(con, by) if by else ()
        if views:
            if passes is not None and summary.pending is None:
                # no rounds at all (an intervals-only trace): nothing was copied, nothing to say
                if summary.rows_read.get("rounds", 0):
                    passes.stats.unused_because = "the rounds break a row rule, so they were copied"
                passes = None
            if progress:
                progress("creating views")
            _create_views_over(con, summary, repeat_n=repeat_n, progress=progress, by=slices, passes=passes)
            if progress and summary.pending is not None:
                progress("counting the rounds' rules that read other rows, from the aggregates")
            counted = passes.witnessed() if passes is not None else None
            if confirm_in_place(con, summary, ROUND_AGGREGATES, progress, counted):
                if passes is not None:
                    passes.stats.unused_because = "the rounds break a rule that reads other rows, so they were copied"
                    passes.release(con)
                    passes = None
                _create_views_over(con, summary, repeat_n=repeat_n, progress=progress, by=slices)
        if passes is None or not passes.check_link_keys(con, summary.rows_without_uid):
            _check_link_keys(con, summary, ROUND_AGGREGATES if views else None)
    except BaseException:
        if row_pass_hooks is not None:
            row_pass_hooks.abandon()        # its writer reads this connection's tables: stopped first
        Workspace(con, None, workdir).close()
        raise
    return Workspace(con, summary, workdir, slices=slices)


def _check_link_keys(con, summary: LoadSummary, aggregates) -> None:
    check_link_keys(con, summary.found, aggregates, written=summary.written_links,
                    rows_without_uid=summary.rows_without_uid)


def _create_views_over(con, summary: LoadSummary, **options) -> None:
    """create_views over tables some of which are read in place: a file whose data pages
    cannot be decoded is named, as the load names it (a structural error, exit 2)."""
    try:
        create_views(con, temporary=True, **options)
    except ViewError:
        name_unreadable_input(con, summary.found)
        raise


# The per-request decode rounds that a slice's speedup needs (request_decode_buckets)
# are a pass over the rounds, which stay on the cluster.
_BY_NEEDS_ROUNDS = ("--by needs the rounds, so it runs on the DuckDB engine over trace files only "
                    "(not --engine spark, nor reduced traces)")


def _is_uri(traces: str | Path) -> bool:
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", str(traces)))


def is_reduced(traces: str | Path) -> bool:
    """A directory written by ``specan load --engine spark --out DIR``."""
    from .spark import MANIFEST

    return (Path(traces) / MANIFEST).is_file()


def open_reduced(tables: dict, summary: LoadSummary | None = None, *, memory_limit: str = DEFAULT_MEMORY_LIMIT,
                 temp_dir: str | Path | None = None, repeat_n: int = DEFAULT_REPEAT_N,
                 progress: Progress | None = None, views: bool = True,
                 reduced_from: tuple[Path, ...] = ()) -> Workspace:
    """The local finish: the reduced tables (name → Arrow table, or → SQL that reads
    them from the folders ``reduced_from``) in a scratch database, with every view that
    can be computed from them.

    The views that read rounds or steps (round_facts, itl_gaps, ...) are left out:
    those rows stayed on the cluster."""
    check_memory_limit(memory_limit)
    file_from = file_database_bytes()
    workdir = private_temp_dir(temp_dir)
    try:
        # as open_traces: a file database in the private folder once the tables are large
        size = sum(t.nbytes for t in tables.values() if not isinstance(t, str))
        size += sum(_total_bytes(p, file_from) for p in reduced_from) if reduced_from else 0
        database = ":memory:" if size < file_from else workdir / "scratch.duckdb"
        con = connect(database, memory_limit=memory_limit, spill_dir=workdir / "spill")
    except BaseException:
        remove_temp_dir(workdir)
        raise
    try:
        for name, table in tables.items():
            if isinstance(table, str):
                con.execute(f'create temp table "{name}" as {table}')
            else:
                con.register("_specan_arrow", table)
                con.execute(f'create temp table "{name}" as select * from _specan_arrow')
                con.unregister("_specan_arrow")
        if "deployments" in tables and "deployment_versions" not in tables:
            # reduced traces written before deployment versions: one version per deployment
            con.execute("create temp table deployment_versions as "
                        "select *, cast(null as varchar) as partition from deployments")
            con.execute("create temp table deployment_conflicts as select deployment_id, cast(null as varchar) "
                        "as partition, 0::bigint as requests, 0::bigint as steps, 0::bigint as rounds "
                        "from deployments where false")
        if views:
            if progress:
                progress("creating the local views")
            left_out = create_local_views(con, set(tables), repeat_n=repeat_n, progress=progress, temporary=True)
            loaded = read_summary(con)
            if summary is not None:
                loaded.notes = list(summary.notes)
            summary = loaded
    except BaseException:
        Workspace(con, None, workdir).close()
        raise
    absent = [t for t in ("rounds", "steps", "requests", "intervals") if t not in tables]
    unavailable = (*absent, *sorted(left_out)) if views else ()
    return Workspace(con, summary, workdir, unavailable)


def open_reduced_dir(traces: str | Path, **options) -> Workspace:
    """A directory written by ``specan load --engine spark --out DIR``, opened for the local finish."""
    import json

    from .spark import MANIFEST

    root = Path(traces)
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        names = list(manifest["tables"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StructuralError(root / MANIFEST, "reduced", None, f"not a readable manifest ({exc})") from None
    tables = {}
    for name in names:
        files = sorted(str(p) for p in (root / name).glob("*.parquet"))
        if not files:
            raise StructuralError(root / name, name, None, "no Parquet files: the reduced directory is incomplete")
        listed = "[" + ", ".join("'" + f.replace("'", "''") + "'" for f in files) + "]"
        tables[name] = f"select * from read_parquet({listed})"
    summary = LoadSummary({}, {}, {}, {}, notes=list(manifest.get("notes", [])))
    return open_reduced(tables, summary, reduced_from=(root,), **options)


def open_database(db: str | Path, *, memory_limit: str = DEFAULT_MEMORY_LIMIT,
                  temp_dir: str | Path | None = None) -> Workspace:
    """Open a database written by ``specan load``."""
    if not Path(db).is_file():
        raise StructuralError(db, "trace_tables", None, "no such database file")
    check_memory_limit(memory_limit)
    workdir = private_temp_dir(temp_dir)
    try:
        con = connect(db, memory_limit=memory_limit, spill_dir=workdir / "spill", read_only=True)
        return Workspace(con, read_summary(con), workdir)
    except BaseException:
        remove_temp_dir(workdir)
        raise


def write_database(traces: str | Path, db: str | Path, *, memory_limit: str = DEFAULT_MEMORY_LIMIT,
                   progress: Progress | None = None, repeat_n: int = DEFAULT_REPEAT_N,
                   temp_dir: str | Path | None = None, by: tuple[str, ...] = ()) -> LoadSummary:
    """Write clean tables and views to ``db``. It is built aside and renamed, so a failed
    load never leaves a half-written database behind. The file keeps to DuckDB's
    storage format ``STORAGE_COMPATIBILITY``, so older DuckDB CLIs open it.
    Through a symbolic link it writes (and replaces) the link's target; a FIFO, a device
    or a socket is refused, since DuckDB can only open a regular file.
    With ``by``, its ``slice_metrics`` view is keyed by those requests columns."""
    db = Path(db)
    check_output(db, regular_because="a DuckDB database must be a regular file")
    check_memory_limit(memory_limit)
    return with_hashed_fallback(lambda hashed: _write_database(
        traces, db, hashed, memory_limit=memory_limit, progress=progress, repeat_n=repeat_n,
        temp_dir=temp_dir, by=by), lambda summary: summary, progress)


def _write_database(traces, db: Path, hashed_links: frozenset[str], *, memory_limit, progress, repeat_n,
                    temp_dir, by) -> LoadSummary:
    # Built beside the link's target and renamed over it: the link stays a link.
    target = output_target(db)
    partial = target.with_name(target.name + ".partial")
    for leftover in (partial, Path(str(partial) + ".wal")):
        leftover.unlink(missing_ok=True)
    workdir = private_temp_dir(temp_dir)
    try:
        con = connect(partial, memory_limit=memory_limit, spill_dir=workdir / "spill",
                      storage_compatibility=STORAGE_COMPATIBILITY)
        try:
            summary = load_traces(con, traces, progress=progress, hashed_links=hashed_links)
            if progress:
                progress("creating views")
            create_views(con, repeat_n=repeat_n, by=resolve_columns(con, by) if by else ())
            _check_link_keys(con, summary, ROUND_AGGREGATES)
            con.execute("checkpoint")
        except BaseException:
            con.close()
            partial.unlink(missing_ok=True)
            raise
        con.close()
        os.replace(partial, target)
    finally:
        remove_temp_dir(workdir)
    return summary


def query(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], list[tuple]]:
    """Run one query; return its column names and rows."""
    result = con.execute(sql)
    if result.description is None:
        return [], []
    return [d[0] for d in result.description], result.fetchall()


def report_document(ws: Workspace, config=None, progress: Progress | None = None) -> dict:
    """The report as a JSON-ready document (docs/metrics.md), with gate results under ``gates``."""
    from .decide.evidence import speedup_evidence
    from .decide.gates import evaluate_gates
    from .analysis.metrics import collect
    from .decide.verdict import verdicts
    from .analysis.quant import quant_matrix

    if config is not None:
        set_config_thresholds(ws.con, config)
    if progress:
        progress("computing metrics")
    doc = collect(ws.con, ws.summary, slices=ws.slices)
    if progress:
        progress("speculation length: cost model and recommendations")
    doc["tuning"] = tuning_document(ws.con, [d["deployment_id"] for d in doc["deployments"] if d["method"] != "none"],
                                    config)
    if progress:
        progress("quantization matrix")
    doc["quantization"] = quant_matrix(ws.con)
    if progress:
        progress("evaluating gates")
    evidence = speedup_evidence(doc)
    doc["gates"] = evaluate_gates(ws.con, config, evidence)
    doc["verdict"] = verdicts(doc, evidence, config)
    return doc


def tuning_document(con, deployment_ids: list[str], config=None) -> dict:
    """Diminishing returns and the recommended speculation length of each speculative deployment."""
    from .analysis.tuning import marginal_returns

    from .analysis import uncertainty

    pairs = uncertainty.matched_pairs(con, "steps")
    recommendations = [_recommendation(con, dep, by_context=True, config=config, pair=pairs.get(dep))
                       for dep in deployment_ids]
    return {"recommendations": [{k: v for k, v in r.items() if k != "cost_fits"} for r in recommendations],
            "cost_model": [fit for r in recommendations for fit in r.get("cost_fits", [])],
            "marginal_returns": marginal_returns(con)}


def check_failures(doc: dict) -> list[dict]:
    """The speculative deployments that do not pass ``report --check`` and ``nightly`` (exit 1):
    one rule, the report's own: only ship and cap pass (decide.verdict.check_failures)."""
    from .decide.verdict import check_failures as failures

    return failures(doc.get("verdict") or [])


def check_line(failure: dict) -> str:
    """ "eagle-fp8: dont_ship: 0.79× … slower than plain decoding": one line per deployment
    that does not pass, as ``--check`` prints it on stderr."""
    return f"{failure['deployment_id']}: {failure['action']}: {failure['reason']}"


def gates_failed(doc: dict) -> bool:
    """Some speculative deployment does not pass (``check_failures``)."""
    return bool(check_failures(doc))


def to_json(doc) -> str:
    """A document as the JSON every command writes: NaN and ±inf as null, UTF-8, indented."""
    import json

    from .render import tables

    return json.dumps(tables.finite(doc), default=tables.json_default, allow_nan=False,
                      ensure_ascii=False, indent=2) + "\n"


# What `report -o FILE` writes when --format is not given: the format follows the extension.
FORMAT_OF_EXTENSION = {".html": "html", ".htm": "html", ".json": "json", ".md": "md", ".markdown": "md"}


def report_format(fmt: str | None, output: str | Path | None) -> str:
    """The report's format: the one asked for, else the one the output file's extension names, else md."""
    if fmt is not None:
        return fmt
    return FORMAT_OF_EXTENSION.get(Path(output).suffix.lower(), "md") if output is not None else "md"


def render_report(doc: dict, fmt: str) -> str:
    from .render import markdown

    if fmt == "json":
        return to_json(doc)
    if fmt == "md":
        return markdown.render(doc)
    if fmt == "html":
        from .render import html

        return html.render(doc)
    raise ValueError(f"unknown report format {fmt!r}")


def validation_text(ws_or_summary) -> str:
    """What ``specan validate`` and ``specan load`` print: rows per table, rejected rows, notes."""
    from .render import text

    if isinstance(ws_or_summary, Workspace):
        return text.validation_summary(ws_or_summary.summary, text.rejected_examples(ws_or_summary.con))
    return text.validation_summary(ws_or_summary)


def render_rows(columns: list[str], rows: list[tuple], fmt: str) -> str:
    """Query results as an aligned table, CSV or JSON (``specan sql``)."""
    from .render import tables

    return {"table": tables.aligned, "csv": tables.to_csv, "json": tables.to_json}[fmt](columns, rows)


def recommend(ws: Workspace, deployment_id: str, *, by_context: bool = False, config=None) -> dict:
    """``specan recommend``: the speculation length per batch-size range of one deployment
    (and, with ``by_context``, within each context bucket). ``config`` (a loaded gates
    TOML) sets the sample-size floors it applies, as ``report --config`` does."""
    if config is not None:
        set_config_thresholds(ws.con, config)
    return _recommendation(ws.con, deployment_id, by_context=by_context, config=config)


def _recommendation(con, deployment_id: str, *, by_context: bool, config=None, pair=None) -> dict:
    """The tuning search's document for one deployment (analysis.tuning), its ranges decided
    from the evidence (decide.configs), and the speedup of that config on the same steps."""
    from .analysis import uncertainty
    from .analysis.config import Config
    from .analysis.tuning import compare_contexts, recommend as search
    from .decide.configs import evidence_ranges, off_ranges

    config = config or Config()
    if pair is None:
        pair = uncertainty.matched_pairs(con, "steps").get(deployment_id)
    rec = search(con, deployment_id, by_context=by_context, pair=pair)
    rec["num_speculative_tokens_per_batch_size"] = ranges = evidence_ranges(rec, config)
    compare_contexts(rec)
    rec["config_speedup"] = None
    if ranges and off_ranges(ranges):
        if pair is not None:
            found = uncertainty.matched_interval(pair.with_off(off_ranges(ranges)),
                                                 max_blocks=config.intervals.max_blocks)
            rec["config_speedup"] = {"speedup": found.speedup["all"], "interval": found.interval["all"],
                                     "off": [list(r) for r in off_ranges(ranges)]}
    return rec


def render_recommend(result: dict, fmt: str) -> str:
    from .render.recommend import render_recommend_markdown

    return to_json(result) if fmt == "json" else render_recommend_markdown(result)


def replay_ngram(ws: Workspace, variants: list[str], *, progress: Progress | None = None, **options) -> list[dict]:
    """``specan replay-ngram``: one replay per variant. Wall-clock timing is printed on
    stderr and left out of the results, so the document is the same run to run."""
    from .analysis.replay import replay_ngram as run
    from .render.replay import move_timing_to_stderr

    return move_timing_to_stderr([run(ws.con, variant=v, progress=progress, **options) for v in variants])


def render_replay(results: list[dict], fmt: str) -> str:
    from .render.replay import render_markdown

    return to_json({"replays": results}) if fmt == "json" else render_markdown(results)


def simulate(outdir: str | Path, *, rounds: int | None = None, progress: Progress | None = None,
             **options) -> dict[str, int]:
    """Write synthetic traces: the documented generative model, or with ``rounds`` the fast path."""
    if rounds is not None:
        from .simulate.fast import simulate_fast

        return simulate_fast(Path(outdir), rounds, progress=progress)
    from .simulate.traces import simulate as run

    return run(Path(outdir), progress=progress, **options)


def trace_format_markdown() -> str:
    """The trace format, generated from schemas/*.json (``specan schema``)."""
    from .ingest.schema import format_table_markdown

    return format_table_markdown()


def import_traces(source: str, files, out, deployments: list[str], **options):
    """``specan import``: engine output → trace tables under ``out``."""
    from .ingest.importers import run_import

    return run_import(source, files, out, deployments, **options)



def import_all(groups: dict, out, deployments: list[str], **options):
    """``specan import``: every group (source → files) read and checked, then written, all or nothing."""
    from .ingest.importers import import_all as run

    return run(groups, out, deployments, **options)


def import_option_notes(groups: dict, options: dict) -> list[str]:
    """``specan import auto``: which source option applied to which file, and which were not used."""
    from .ingest.importers import option_notes

    return option_notes(groups, options)


def import_layouts(source: str) -> list[str]:
    """``specan import SOURCE --list-layouts``: the layouts a source reads, one a line."""
    from .ingest.importers import list_layouts

    return list_layouts(source)


def pick_import_sources(files) -> dict:
    """``specan import auto``: the source each file's content fits, files grouped by source."""
    from .ingest.importers import pick_sources

    return pick_sources(files)


def list_imports(traces: str | Path) -> list[dict]:
    """The imports recorded in a trace directory (``specan import --list``), oldest first."""
    from .ingest.importers.common import list_imports as run

    return run(traces)


def remove_import(traces: str | Path, import_id: str) -> dict:
    """Take one import back (``specan import --remove``): its files are deleted."""
    from .ingest.importers.common import remove_import as run

    return run(traces, import_id)


def render_imports(imports: list[dict]) -> str:
    from .render import tables

    rows = [(m["id"], m["source"], m["imported_at"][:19] + "Z", " ".join(f"{t}={n}" for t, n in sorted(m["rows"].items())),
             " ".join(i["path"] for i in m["inputs"]) or "–") for m in imports]
    return tables.aligned(["id", "source", "imported at", "rows", "inputs"], rows)


def write_reduced(traces: str | Path, out: str | Path, *, spark_master: str | None = None,
                  progress: Progress | None = None, spark_checkpoint_dir: str | None = None,
                  repeat_n: int = DEFAULT_REPEAT_N) -> tuple[LoadSummary, dict[str, int]]:
    """``specan load --engine spark --out DIR``: the heavy pass on Spark, its reduced
    tables written under ``out`` as Parquet for a later ``specan report DIR``."""
    from . import spark

    if not _is_uri(out) and Path(out).exists() and not Path(out).is_dir():
        raise EnvironmentProblem(f"cannot write {out}: it exists and is not a directory")
    return spark.write_reduced(str(traces), str(out), master=spark_master, progress=progress,
                               checkpoint_dir=spark_checkpoint_dir, repeat_n=repeat_n)
