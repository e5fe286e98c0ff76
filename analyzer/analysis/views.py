"""Create the views in ``sql/``: one view per file, the file name is the view name.

The folders are the layers, in the order data flows through them:
``staging`` (one row per row of an input table, cleaned and labelled),
``intermediate`` (the passes over the rounds and the sums every metric reads)
and ``marts`` (the metrics). A view reads only views of its own or an earlier
layer.

Whether a view is computed once as a table rather than on every query is
declared in ``sql/materialized.toml``; everything else is a plain view.

Dependencies come from the SQL itself, parsed with sqlglot: a view depends on
every other view that it reads as a table. A CTE of the same name is not a
dependency. The views are created in topological order, so adding a file never
needs a registry edit; a cycle is an error that names the cycle.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import duckdb
import sqlglot
from sqlglot import exp

from ..errors import InputProblem, InternalError
from ..ingest.rules import RoundAggregates
from ..resources import resource_dir
from . import buckets
from .config import Config
from .partitions import create_request_partitions
from .slices import create_slice_relations

LAYERS = ("staging", "intermediate", "marts")
MATERIALIZED_FILE = "materialized.toml"
SCALEOUT_FILE = "scaleout.toml"
# The input tables the views read (besides metadata tables, which always exist).
INPUT_TABLES = frozenset({"deployments", "requests", "steps", "rounds", "intervals"})

DEFAULT_REPEAT_N = 3

# The views that are the rounds' aggregates the loader's in-place strategy counts the
# rules that read other rows from (analyzer/ingest/rules.py, RoundAggregates).
ROUND_AGGREGATES = RoundAggregates(per_request="request_rounds", per_step="step_rounds")


class ViewError(InternalError):
    """A problem with the SQL files themselves (cycle, duplicate name, bad SQL): exit 3,
    since the shipped SQL is part of specan, not of the input."""


@dataclass(frozen=True)
class View:
    name: str
    layer: str
    path: Path
    sql: str
    purpose: str
    materialized: bool = False

    @property
    def references(self) -> frozenset[str]:
        """The relations this view reads, excluding its own CTEs."""
        try:
            return _relations_read(self.sql)
        except sqlglot.errors.ParseError as exc:
            raise ViewError(f"{self.path}: cannot parse view {self.name}: {str(exc).splitlines()[0]}") from None


# Parsing every view costs ~0.3 s; a process that opens traces many times (tests,
# a notebook) parses each distinct text once.
@lru_cache(maxsize=512)
def _relations_read(sql: str) -> frozenset[str]:
    tree = sqlglot.parse_one(sql, read="duckdb")
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    tables = {table.name.lower() for table in tree.find_all(exp.Table) if table.name}
    return frozenset(tables - ctes)


def _materialized(sql_dir: Path) -> set[str]:
    path = sql_dir / MATERIALIZED_FILE
    if not path.is_file():
        return set()
    try:
        declared = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ViewError(f"{path}: {exc}") from None
    tables = declared.get("tables", [])
    if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables):
        raise ViewError(f"{path}: 'tables' must be a list of view names")
    return {t.lower() for t in tables}


@dataclass(frozen=True)
class ScaleOut:
    """``sql/scaleout.toml``: which views a scale-out engine computes (``heavy``), which of
    them come back to the local finish, each with the columns left behind (``fetched``),
    and which hold no row unless a query finds one (``empty_unless``: view → that query)."""

    heavy: frozenset[str]
    fetched: dict[str, tuple[str, ...]]
    empty_unless: dict[str, str] = field(default_factory=dict)


def scaleout_split(sql_dir: Path | None = None) -> ScaleOut:
    sql_dir = sql_dir or resource_dir("sql")
    path = sql_dir / SCALEOUT_FILE
    try:
        declared = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ViewError(f"{path}: {exc}") from None
    views = discover_views(sql_dir)
    heavy = frozenset(declared.get("heavy", []))
    fetched = {name: tuple(columns) for name, columns in declared.get("fetched", {}).items()}
    unknown = sorted((heavy | fetched.keys()) - views.keys())
    if unknown:
        raise ViewError(f"{path}: no view named {', '.join(unknown)}")
    if not fetched.keys() <= heavy:
        raise ViewError(f"{path}: fetched views that are not heavy: {', '.join(sorted(fetched.keys() - heavy))}")
    empty_unless = dict(declared.get("empty_unless", {}))
    for name, query in empty_unless.items():
        if name not in heavy or not isinstance(query, str):
            raise ViewError(f"{path}: [empty_unless] {name} must be a heavy view with a query")
        read = _relations_read(query) - {name}
        later = sorted(r for r in read if r in views and name in _depends_on(views, r))
        if later:
            raise ViewError(f"{path}: [empty_unless] {name} reads {', '.join(later)}, which is made after it")
    return ScaleOut(heavy, fetched, empty_unless)


def _depends_on(views: dict[str, View], name: str) -> set[str]:
    """Every view ``name`` reads, directly or through other views."""
    seen, stack = set(), [name]
    while stack:
        for ref in views[stack.pop()].references & views.keys():
            if ref not in seen:
                seen.add(ref)
                stack.append(ref)
    return seen


def discover_views(sql_dir: Path | None = None) -> dict[str, View]:
    sql_dir = sql_dir or resource_dir("sql")
    materialized = _materialized(sql_dir)
    views: dict[str, View] = {}
    for layer in LAYERS:
        for path in sorted((sql_dir / layer).glob("*.sql")):
            name = path.stem.lower()
            if name in views:
                raise ViewError(f"{path}: view {name} is also defined in {views[name].path}")
            text = path.read_text(encoding="utf-8").strip().rstrip(";").strip()
            purpose = " ".join(line[2:].strip() for line in text.splitlines()
                               if line.startswith("--")).strip()
            views[name] = View(name, layer, path, text, purpose, name in materialized)
    unknown = sorted(materialized - views.keys())
    if unknown:
        raise ViewError(f"{sql_dir / MATERIALIZED_FILE}: no view named {', '.join(unknown)}")
    return views


def dependencies(views: dict[str, View]) -> dict[str, list[str]]:
    return {name: sorted((view.references & views.keys()) - {name}) for name, view in views.items()}


def dependency_order(views: dict[str, View]) -> list[str]:
    # Sorted input, so the order (and every database written) is the same run to run.
    graph = dict(sorted(dependencies(views).items()))
    try:
        return list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        cycle = exc.args[1]
        raise ViewError("views form a cycle: " + " -> ".join(cycle)) from None


def layer_violations(views: dict[str, View]) -> list[str]:
    """Views that read a view of a later layer ("staging/a reads marts/b")."""
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    return [f"{view.layer}/{name} reads {views[dep].layer}/{dep}"
            for name, view in sorted(views.items()) for dep in dependencies(views)[name]
            if rank[views[dep].layer] > rank[view.layer]]


# The sections of the gates TOML whose keys the views (and the recommendation, which reads
# them back from the connection) use as SQL macros, each with the prefix of its macro
# names: a bare ``seed()`` or ``replicates()`` would say nothing in a view.
CONFIG_MACRO_SECTIONS = {"anomalies": "", "evidence": "", "intervals": "intervals_"}


def config_macros_sql(config: Config | None = None) -> str:
    """The thresholds the views read, as macros named like the keys of the gates TOML
    (``stall_min_ms()``, ``min_baseline_steps()``, ``intervals_replicates()``, ...).
    Macros rather than literals in the views, so ``specan sql`` reads the defaults and
    ``--config`` replaces them without recreating any view; integers stay integers, the
    rest are DOUBLE."""
    config = config or Config()
    statements = []
    for section, prefix in CONFIG_MACRO_SECTIONS.items():
        for name, value in dataclasses.asdict(getattr(config, section)).items():
            body = str(value) if isinstance(value, int) else f"cast({float(value)!r} as double)"
            statements.append(f"create or replace macro {prefix}{name}() as {body};")
    return "\n".join(statements)


def config_macro_names() -> tuple[str, ...]:
    """Every macro ``config_macros_sql`` creates, in its order."""
    return tuple(f"{prefix}{f.name}" for section, prefix in CONFIG_MACRO_SECTIONS.items()
                 for f in dataclasses.fields(getattr(Config(), section)))


def set_config_thresholds(con: duckdb.DuckDBPyConnection, config: Config, sql_dir: Path | None = None) -> None:
    """Replace the thresholds the views read with ``config``'s (temporary macros: a
    report's workspace holds temporary objects only), and recompute the tables computed
    with the ones they replace.

    A plain view reads the macros when it is queried, but a table holds what the macros
    said when it was computed: every materialized view that calls a config macro, or reads
    one that does, is computed again (``config_dependent_tables``), in dependency order,
    when the macros' text changes. A workspace keeps the text it last applied
    (``config_applied``), so the same config applied twice recomputes nothing."""
    text = config_macros_sql(config)
    applied = con.execute("select text from config_applied").fetchone() if _has_relation(con, "config_applied") \
        else None
    if applied and applied[0] == text:
        return
    con.execute(text.replace("create or replace macro", "create or replace temp macro"))
    before = applied[0] if applied else config_macros_sql(None)
    if text != before:
        views = discover_views(sql_dir)
        tables = {r[0] for r in con.execute("select table_name from duckdb_tables()").fetchall()}
        relations = tables | {r[0] for r in con.execute("select view_name from duckdb_views()").fetchall()}
        for name in config_dependent_tables(views):
            # a reduced workspace (the Spark engine's) holds what the cluster computed with the
            # config already, without the units it read: nothing to recompute there
            if name in tables and (views[name].references & (views.keys() | INPUT_TABLES)) <= relations:
                con.execute(f'create or replace temp table "{name}" as\n{views[name].sql}')
    con.execute("create or replace temp table config_applied as select ? as text", [text])


def _has_relation(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(con.execute("select count(*) from duckdb_tables() where table_name = ?", [name]).fetchone()[0])


@lru_cache(maxsize=8)
def _config_callers(views_key: tuple[tuple[str, str], ...]) -> frozenset[str]:
    names = set(config_macro_names())
    return frozenset(name for name, sql in views_key
                     if {f.name.lower() for f in sqlglot.parse_one(sql, read="duckdb").find_all(exp.Anonymous)} & names)


def config_dependent_tables(views: dict[str, View]) -> list[str]:
    """The materialized views whose rows depend on a config macro: those that call one, and
    those that read (through any chain of views) one that does; in dependency order."""
    callers = set(_config_callers(tuple(sorted((n, v.sql) for n, v in views.items()))))
    deps = dependencies(views)
    dependent: set[str] = set()
    for name in dependency_order(views):
        if name in callers or any(d in dependent for d in deps[name]):
            dependent.add(name)
    return [n for n in dependency_order(views) if n in dependent and views[n].materialized]


def create_macros(con: duckdb.DuckDBPyConnection, repeat_n: int = DEFAULT_REPEAT_N,
                  sql_dir: Path | None = None, temporary: bool = False) -> None:
    """Macros the views call, and the bucket seed. They are stored in the database,
    so plain duckdb has them too.

    ``ngram_hash(s, i)`` hashes the (n+1)-gram of list ``s`` ending at 1-based index i.
    It is written out with n + 1 arguments rather than as a list slice, which would
    allocate a list per token and run about 15x slower.
    """
    if not 1 <= repeat_n <= 32:
        raise InputProblem(f"repeat n must be between 1 and 32, got {repeat_n}")
    parts = ", ".join(f"s[i - {j}]" for j in range(repeat_n, 0, -1))
    create = "create or replace temp" if temporary else "create or replace"
    con.execute(f"{create} macro repeat_n() as {repeat_n}")
    con.execute(f"{create} macro ngram_hash(s, i) as hash({parts}, s[i])")
    con.execute(buckets.macros_sql().replace("create or replace ", create + " "))
    macros = (sql_dir or resource_dir("sql")) / "macros.sql"
    if macros.is_file():
        con.execute(macros.read_text(encoding="utf-8").replace("create or replace macro", f"{create} macro"))
    con.execute(config_macros_sql().replace("create or replace macro", f"{create} macro"))


def create_views(con: duckdb.DuckDBPyConnection, sql_dir: Path | None = None, *,
                 repeat_n: int = DEFAULT_REPEAT_N, progress=None, temporary: bool = False,
                 by: tuple[str, ...] = (), passes=None) -> list[str]:
    """Create the macros and every view; returns the view names in creation order.

    ``by``: the requests columns the slice views are keyed by (``analysis.slices``);
    an unknown one is an InputProblem, raised before any view is created.

    ``progress`` is told about each materialised table: those are the long steps.
    With ``temporary`` every object is a temporary one: a scratch workspace needs
    none of them on disk, and each persistent DDL statement costs a write-ahead-log
    write (about half of opening a small trace).

    ``passes`` (``pass_cache.CachedPasses``) builds the passes over the rounds, per
    trace unit and from the cache, before the other views are created over them.
    """
    create_macros(con, repeat_n, sql_dir, temporary)
    create_slice_relations(con, by, temporary=temporary)
    create_request_partitions(con, temporary=temporary)
    views = discover_views(sql_dir)
    order = dependency_order(views)
    # shared: a table another connection of the database can read (the cache's writer)
    built = passes.build(con, views, order, lambda v, shared=False: _create(con, v, temporary and not shared, progress)) \
        if passes else set()
    for name in order:
        if name not in built:
            _create(con, views[name], temporary, progress)
    return order


def _create(con: duckdb.DuckDBPyConnection, view: View, temporary: bool, progress) -> None:
    kind = ("table" if view.materialized else "view") if not temporary else (
        "temp table" if view.materialized else "temp view")
    if view.materialized and progress:
        progress(f"computing {view.name}")
    try:
        con.execute(f'create or replace {kind} "{view.name}" as\n{view.sql}')
    except duckdb.Error as exc:
        raise ViewError(f"{view.path}: cannot create view {view.name}: {str(exc).splitlines()[0]}") from None


def create_local_views(con: duckdb.DuckDBPyConnection, present: set[str], sql_dir: Path | None = None, *,
                       repeat_n: int = DEFAULT_REPEAT_N, progress=None, temporary: bool = False) -> list[str]:
    """The local finish after a scale-out engine: every view that is not already a table
    in ``present`` and whose inputs are there. Returns the views left out (they read
    rounds or steps, which stayed on the cluster). The slice relations are created
    empty: the slice views that can be created here exist, empty."""
    create_macros(con, repeat_n, sql_dir, temporary)
    create_slice_relations(con, temporary=temporary)
    create_request_partitions(con, temporary=temporary)
    views = discover_views(sql_dir)
    available = set(present)
    left_out = []
    for name in dependency_order(views):
        if name in present:
            continue
        view = views[name]
        needed = (view.references & (views.keys() | INPUT_TABLES)) - {name}
        if not needed <= available:
            left_out.append(name)
            continue
        _create(con, view, temporary, progress)
        available.add(name)
    return left_out
