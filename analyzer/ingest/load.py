"""Read a trace directory into DuckDB: find the files, check their structure,
apply the row rules, and build the clean tables.

The flow, per table in the order deployments, requests, steps, rounds, intervals:

1. ``discover`` finds ``TRACES/<table>.parquet`` or ``TRACES/<table>/**/*.parquet``
   and reads every file's Parquet footer (cheap: no data pages).
2. ``check_structure`` raises ``StructuralError`` for unreadable files, missing
   required tables or columns, and values that cannot be cast to the declared
   type. These stop the run: nothing can be analysed correctly from such input.
3. The row rules, as ``analyzer.ingest.rules`` defines them once, by one of two
   strategies: ``load_exactly`` (one scan casts the files into ``_raw_<table>``,
   with defaults applied and NaN/inf read as null; the classification picks out
   the rejected rows; the rest become the clean table), or for the rounds of a
   report ``read_in_place`` then ``confirm_in_place`` (no copy: counts that are
   zero exactly when no row breaks a rule, else the exact strategy).

The SQL text itself lives in ``analyzer.ingest.rules`` (rules) and ``sql/`` (views);
this module decides *what* to build from the files it finds. It reads no view of
``sql/``: the in-place strategy is handed the rounds' aggregates it counts from
(``rules.RoundAggregates``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputProblem, InternalError, first_line
from . import rules
from .schema import TABLE_ORDER, TableSchema, load_schemas

Progress = Callable[[str], None]



class StructuralError(InputProblem):
    """Input that cannot be analysed at all. The CLI prints it and exits 2."""

    def __init__(self, file: str | Path | None, table: str, column: str | None, problem: str):
        self.file, self.table, self.column, self.problem = file, table, column, problem
        where = [str(file)] if file is not None else []
        where.append(f"table {table}")
        if column:
            where.append(f"column {column}")
        super().__init__(f"{': '.join(where[:1])}: {', '.join(where[1:])}: {problem}" if file else
                         f"{', '.join(where)}: {problem}")


@dataclass
class TableFiles:
    """The Parquet files of one table, and what their footers say."""

    table: str
    files: list[Path] = field(default_factory=list)
    file_schemas: dict[Path, pa.Schema] = field(default_factory=dict)
    partitions: list[str] = field(default_factory=list)
    file_partitions: dict[Path, dict[str, str]] = field(default_factory=dict)

    @property
    def present(self) -> bool:
        return bool(self.files)

    def columns_in(self, path: Path) -> set[str]:
        return set(self.file_schemas[path].names) | set(self.file_partitions[path])

    @property
    def columns_anywhere(self) -> set[str]:
        found: set[str] = set()
        for path in self.files:
            found |= self.columns_in(path)
        return found


@dataclass
class LoadSummary:
    rows_read: dict[str, int]
    rows_clean: dict[str, int]
    present: dict[str, bool]
    rejected: dict[str, dict[str, int]]
    # rounds read in place whose rules that read other rows are not yet counted (confirm_in_place)
    pending: RoundsInPlace | None = field(default=None, repr=False, compare=False)
    notes: list[str] = field(default_factory=list)   # about the input, e.g. entries that are not tables
    found: dict | None = field(default=None, repr=False, compare=False)  # the files read, per table
    # the link keys read from the files (rules.TablePlan.written_links), and per link key
    # the rows that have its id but not the uid
    written_links: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    rows_without_uid: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    @property
    def rejected_total(self) -> int:
        return sum(sum(by_reason.values()) for by_reason in self.rejected.values())


# ----------------------------------------------------------------------------
# 1. discovery


def _table_paths(traces: Path, table: str) -> tuple[Path | None, list[Path]]:
    single = traces / f"{table}.parquet"
    folder = traces / table
    if single.is_file() and folder.is_dir():
        raise StructuralError(traces, table, None,
                              f"both {single.name} and {table}/ exist; expected one of them")
    if single.is_file():
        return None, [single]
    if folder.is_dir():
        return folder, sorted(p for p in folder.rglob("*.parquet") if p.is_file())
    return None, []


_PARTITION_SEGMENT = re.compile(r"^([^=/]+)=(.*)$")


def partition_values(folders) -> dict[str, str]:
    """The Hive partition values of a file below a table's folder: ``key=value`` folder
    names, each value decoded as DuckDB and Spark decode it when they read the column
    (percent-encoding, UTF-8: ``hour=00%3A00`` is 00:00, as Spark writes it; an invalid
    escape stays as written). The one place specan reads a partition value from a path."""
    return {m.group(1): unquote(m.group(2)) for segment in folders if (m := _PARTITION_SEGMENT.match(segment))}


def _partitions_of(path: Path, root: Path | None) -> dict[str, str]:
    return {} if root is None else partition_values(path.relative_to(root).parts[:-1])


def discover(traces: Path, date: str | None = None, tables: tuple[str, ...] = TABLE_ORDER) -> dict[str, TableFiles]:
    """Find each table's files and read their footers.

    With ``date``, a table partitioned by ``date=`` keeps only that date's files.
    """
    traces = Path(traces)
    if not traces.exists():
        raise InputProblem(f"{traces}: no such directory")
    if not traces.is_dir():
        raise InputProblem(f"{traces}: not a directory; expected a trace directory holding "
                           f"{', '.join(t + '/' for t in TABLE_ORDER)} (or <table>.parquet files)")
    found = {}
    for table in tables:
        root, paths = _table_paths(traces, table)
        entry = TableFiles(table)
        for path in paths:
            entry.file_partitions[path] = _partitions_of(path, root)
        if date is not None and any("date" in p for p in entry.file_partitions.values()):
            paths = [p for p in paths if entry.file_partitions[p].get("date") == date]
            if not paths:
                raise StructuralError(traces / table, table, None, f"no partition date={date}")
        for path in paths:
            try:
                entry.file_schemas[path] = pq.read_schema(path)
            except (pa.ArrowException, OSError) as exc:
                raise StructuralError(path, table, None, f"not readable Parquet ({first_line(exc)})") from None
            entry.files.append(path)
            for key in entry.file_partitions[path]:
                if key not in entry.partitions:
                    entry.partitions.append(key)
        found[table] = entry
    if date is not None and not any("date" in p for entry in found.values() for p in entry.file_partitions.values()):
        hint = "" if any(e.present for e in found.values()) else where_the_tables_are(traces)
        raise InputProblem(f"{traces}: no table is partitioned by date= (folders such as rounds/date={date}/), "
                           f"so --date {date} cannot select a day{hint}")
    return found


# What a trace directory may hold besides the tables: the importers' notes, and
# files tools leave (hidden files, a README).
_KNOWN_ENTRIES = {"import_notes"}


def unknown_entries(traces: Path) -> list[str]:
    """A note for each entry of TRACES that is not a table, naming the closest table."""
    return entry_notes(str(traces), ((e.name, e.is_dir()) for e in Path(traces).iterdir()))


def entry_notes(traces: str, entries) -> list[str]:
    """``unknown_entries`` for the ``(name, is_folder)`` entries of ``traces``, however
    they were listed (the Spark engine lists a URI through Hadoop's FileSystem)."""
    names = set(TABLE_ORDER) | {f"{t}.parquet" for t in TABLE_ORDER} | _KNOWN_ENTRIES
    notes = []
    for name, is_dir in sorted(entries):
        if name in names or name.startswith((".", "_")) or Path(name).suffix.lower() in (".md", ".txt"):
            continue
        stem = name.removesuffix(".parquet")
        close = difflib.get_close_matches(stem, TABLE_ORDER, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}{'/' if is_dir else '.parquet'}?" if close else ""
        notes.append(f"{name}{'/' if is_dir else ''} in {traces} is not a trace table "
                     f"and was not read{hint}")
    return notes


# ----------------------------------------------------------------------------
# 2. structure

# Arrow types that convert to the declared type without any chance of failure.
def _always_castable(arrow_type: pa.DataType, declared: str) -> bool:
    if pa.types.is_null(arrow_type):
        return True
    if declared == "VARCHAR":
        return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or pa.types.is_dictionary(arrow_type)
    if declared == "INTEGER":
        return arrow_type in (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16())
    if declared == "BIGINT":
        return pa.types.is_integer(arrow_type) and arrow_type != pa.uint64()
    if declared == "DOUBLE":
        return pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) or pa.types.is_decimal(arrow_type)
    if declared == "BOOLEAN":
        return pa.types.is_boolean(arrow_type)
    if declared == "TIMESTAMP":
        return pa.types.is_timestamp(arrow_type) or pa.types.is_date(arrow_type)
    if declared in ("INTEGER[]", "BIGINT[]"):
        return ((pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type))
                and _always_castable(arrow_type.value_type, declared[:-2]))
    return False


def holds_tables(folder: Path) -> bool:
    """Whether ``folder`` holds a trace table (``<table>.parquet`` or ``<table>/``)."""
    return any((folder / f"{t}.parquet").is_file() or (folder / t).is_dir() for t in TABLE_ORDER)


def where_the_tables_are(traces: str | Path) -> str:
    """For a trace directory that holds no table: the folders next to it that do, as
    "; did you mean ...?" (its subfolders, or the folder above when TRACES is one of its
    tables), else ""."""
    folder = Path(traces)
    try:
        below = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".") and holds_tables(p))
    except OSError:
        return ""
    if below:
        named = " or ".join(str(p) for p in below[:3]) + (f" (or {len(below) - 3} more)" if len(below) > 3 else "")
        return f"; did you mean {named}? ({'it holds' if len(below) == 1 else 'they hold'} trace tables)"
    if folder.name in TABLE_ORDER and holds_tables(folder.parent):
        return f"; did you mean {folder.parent}? ({folder} is its {folder.name} table)"
    return ""


def check_structure(con: duckdb.DuckDBPyConnection | None, found: dict[str, TableFiles],
                    cast_check: Callable | None = None, traces: str | Path | None = None) -> None:
    """Raise StructuralError for a missing table or column, or an uncastable value.

    ``cast_check(paths, table, column, declared, arrow_type)`` raises for the first file
    of ``paths`` (the files whose column has that type, in path order) holding an
    uncastable value (default: DuckDB on ``con``, file by file; the Spark engine passes
    one job over them all). The missing columns of every file are checked first.
    ``traces``, the trace directory as given, is named by a missing table's message,
    with the folders near it that hold tables when it holds none (a local directory)."""
    def each_file(paths, *args):
        for path in paths:
            _check_cast(con, path, *args)

    cast_check = cast_check or each_file
    schemas = load_schemas()
    for table, entry in found.items():
        schema = schemas[table]
        # docs/importers.md: a directory with intervals, or with steps that carry their own token
        # counts (engine iteration lines), may lack rounds; only the views of those apply then.
        optional_here = table == "rounds" and any(found.get(t) is not None and found[t].present
                                                  for t in ("intervals", "steps"))
        if schema.required and not entry.present and not optional_here:
            hint = ""
            if traces is not None and "://" not in str(traces) and not any(e.present for e in found.values()):
                hint = where_the_tables_are(traces)
            raise StructuralError(traces, table, None,
                                  f"required table is missing: expected {table}.parquet or {table}/**/*.parquet"
                                  + hint)
        for path in entry.files:
            have = entry.columns_in(path)
            for column in schema.required_columns:
                if column not in have:
                    raise StructuralError(path, table, column, "required column is missing")
        for column in schema.columns:
            by_type: dict[str, tuple[pa.DataType, list]] = {}
            for path in entry.files:
                arrow = entry.file_schemas[path]
                if column.name in arrow.names and not _always_castable(arrow.field(column.name).type, column.type):
                    arrow_type = arrow.field(column.name).type
                    by_type.setdefault(str(arrow_type), (arrow_type, []))[1].append(path)
            for arrow_type, paths in by_type.values():
                cast_check(paths, table, column.name, column.type, arrow_type)


def _check_cast(con, path: Path, table: str, column: str, declared: str, arrow_type: pa.DataType) -> None:
    """Find a value in one file that does not convert to the declared type."""
    sql = rules.uncastable_value_sql(column, declared)
    try:
        bad = con.execute(sql, [str(path)]).fetchone()
    except duckdb.Error as exc:
        raise StructuralError(path, table, column,
                              f"expected {declared}, found {arrow_type} ({first_line(exc)})") from None
    if bad is not None:
        raise uncastable(path, table, column, declared, arrow_type, bad[0])


def uncastable(path, table: str, column: str, declared: str, arrow_type, value) -> StructuralError:
    """The structural error of a value that does not convert to its column's declared type."""
    what = "is not an ISO-8601 time" if declared == "TIMESTAMP" else "cannot be cast"
    return StructuralError(path, table, column, f"expected {declared}, found {arrow_type} value {value!r} that {what}")


# ----------------------------------------------------------------------------
# 3 + 4. build raw and clean tables: the row rules, exactly or in place


@dataclass(frozen=True)
class RoundsInPlace:
    """Rounds read in place whose rules that read other rows are not yet counted."""

    found: dict[str, TableFiles]
    plan: rules.TablePlan


# the tables whose rows name a deployment (a conflict's notes count them)
DEPENDENT_TABLES = ("requests", "steps", "rounds")


def load_traces(
    con: duckdb.DuckDBPyConnection,
    traces: str | Path,
    *,
    date: str | None = None,
    progress: Progress | None = None,
    rounds_in_place: bool = False,
    hashed_links: frozenset[str] = frozenset(),
    row_pass: RowPass | None = None,
) -> LoadSummary:
    """Build the clean tables, ``rejected_rows`` and the metadata tables in ``con``.

    Every table takes the exact strategy (``load_exactly``) except, with
    ``rounds_in_place``, the rounds: then ``rounds`` is a view over the Parquet
    files as long as one pass finds no row that breaks a rule that reads the row
    alone. The rules that read other rows are then still to be counted: the caller
    builds the rounds' aggregates and calls ``confirm_in_place``, which takes the
    exact strategy when a count is not zero.

    The link keys a writer stored are used unless ``hashed_links`` names them (the
    caller's second load, once ``check_link_keys`` found them invalid).

    ``row_pass`` counts the in-place rounds' row rules instead of one pass over every
    file (the cache of the passes: ``analysis.pass_cache``, which keeps each trace
    unit's counts).
    """
    say = progress or (lambda _msg: None)
    con.execute("set TimeZone = 'UTC'")
    found = discover(Path(traces), date=date)
    say("checking structure")
    check_structure(con, found, traces=traces)
    schemas = load_schemas()
    written, link_notes = written_links(found, hashed_links)
    con.execute("create or replace table rejected_rows (table_name varchar, row_key varchar, reason varchar)")
    rows_read: dict[str, int] = {}
    rejected: dict[str, dict[str, int]] = {}
    without_uid: dict[str, int] = {}
    pending = None
    # In order: a table's rules read its parents as read (their clean rows and the
    # rejected copies) and the clean steps (round_out_of_order).
    for table in TABLE_ORDER:
        entry, schema = found[table], schemas[table]
        plan = table_plan(entry, schema, found, written)
        if table == "rounds" and rounds_in_place and entry.present:
            say(f"reading rounds ({len(entry.files)} files, in place: counting row-rule breaks)")
            rows_read[table], breaking, missing = read_in_place(con, schema, plan, entry, row_pass, found, written)
            rejected[table] = {}
            if not breaking:
                # every round as read is counted: the exact strategy confirm_in_place may
                # take later reads the same rows
                _add_counts(without_uid, missing)
                pending = RoundsInPlace(found, plan)
                continue
            say("rounds break a row rule (" + ", ".join(f"{r} {n}" for r, n in breaking.items())
                + "): copying the rounds to reject them")
        else:
            say(f"reading {table} ({len(entry.files)} file{'s' if len(entry.files) != 1 else ''})")
        rows_read[table], rejected[table] = load_exactly(con, schema, plan, entry, say)
        _add_counts(without_uid, count_rows_without_uid(con, schema, plan))

    rows_clean = {t: con.execute(f"select count(*) from {t}").fetchone()[0] for t in TABLE_ORDER}
    count_conflict_rows(con, {t: table_plan(found[t], schemas[t], found, written) for t in TABLE_ORDER})
    _write_metadata(con, found, schemas, rows_read, rows_clean)
    _load_import_notes(con, Path(traces))
    summary = LoadSummary(rows_read, rows_clean, {t: found[t].present for t in TABLE_ORDER}, rejected,
                          notes=unknown_entries(Path(traces)) + link_notes, found=found,
                          written_links=written, rows_without_uid=without_uid)
    summary.pending = pending
    return summary


def _add_counts(counts: dict[str, int], more: dict[str, int]) -> None:
    for key, n in more.items():
        if n:
            counts[key] = counts.get(key, 0) + n


def count_rows_without_uid(con, schema: TableSchema, plan: rules.TablePlan) -> dict[str, int]:
    """Per written link key of the loaded ``schema.table``, its rows (clean and rejected)
    that have the link's id but not the uid its writer should have stored."""
    sql = rows_without_uid_sql(schema, plan, rules.parents_as_read_sql(schema.table))
    return dict(zip(sorted(rules.rows_without_uid_conditions(schema, plan)), con.execute(sql).fetchone())) if sql else {}


def rows_without_uid_sql(schema: TableSchema, plan: rules.TablePlan, relation: str) -> str | None:
    """Per written link key of the table (in sorted order), how many rows of ``relation``
    have the link's id but not the uid; None when the table has no written link key."""
    conditions = rules.rows_without_uid_conditions(schema, plan)
    if not conditions:
        return None
    return "select " + ", ".join(f"count(*) filter (where {conditions[uid]})" for uid in sorted(conditions)) \
        + f" from {relation}"


def count_conflict_rows(con, plans: dict[str, rules.TablePlan]) -> None:
    """Add to ``deployment_conflicts`` the rows of requests, steps and rounds that need each
    conflicting deployment (one pass over a table only when there is a conflict)."""
    _versions, conflicts = rules.VERSIONS["deployments"]
    any_conflict = con.execute(f"select count(*) from {conflicts}").fetchone()[0] > 0
    select = rules.conflict_rows_sql(plans, DEPENDENT_TABLES, any_conflict=any_conflict)
    con.execute(f"create or replace table _counted as {select}")
    con.execute(f"drop table {conflicts}")
    con.execute(f"alter table _counted rename to {conflicts}")


def rule_inputs(schema: TableSchema) -> rules.RuleInputs:
    """Where the exact strategy classifies a table: its copy, and the parents loaded before it."""
    parents = {ref.table for ref in schema.references}
    return rules.RuleInputs(rows=f"_raw_{schema.table}",
                            parents={p: rules.parents_as_read_sql(p) for p in parents},
                            clean={"steps": "steps"} if schema.table == "rounds" else {})


def load_exactly(con, schema: TableSchema, plan: rules.TablePlan, entry: TableFiles,
                 progress: Progress | None = None) -> tuple[int, dict[str, int]]:
    """The exact strategy: copy the table's rows, materialise their classification, keep
    the rejected rows aside and the rest as the clean table. ``(rows read, rejected by reason)``."""
    table = schema.table
    con.execute(f"drop view if exists {table}")
    _execute(con, rules.raw_table_sql(schema, plan), entry)
    rows = con.execute(f"select count(*) from _raw_{table}").fetchone()[0]
    if progress:
        progress(f"applying row rules to {table}")
    _execute(con, rules.rejected_sql(schema, plan, rule_inputs(schema)), entry)
    con.execute(f"insert into rejected_rows select table_name, row_key, reason from _rejected_{table}")
    by_reason = dict(con.execute(
        f"select reason, count(*) from _rejected_{table} group by reason order by reason").fetchall())
    for statement in rules.clean_table_sql(schema, plan):
        con.execute(statement)
    con.execute(f"drop table _rejected_{table}")
    return rows, by_reason


class RowPass(Protocol):
    """Counts the row rules of rounds read in place (``rules.row_pass_sql``'s columns, summed)."""

    def count_row_rules(self, execute: Callable[[str], duckdb.DuckDBPyConnection], schema: TableSchema,
                        plan: rules.TablePlan, found: dict[str, TableFiles],
                        written: frozenset[str]) -> dict[str, int]: ...


def read_in_place(con, schema: TableSchema, plan: rules.TablePlan, entry: TableFiles,
                  row_pass: RowPass | None = None, found: dict[str, TableFiles] | None = None,
                  written: frozenset[str] = frozenset()) -> tuple[int, dict[str, int], dict[str, int]]:
    """The in-place strategy's first half: ``<table>`` becomes a view over the files, and one
    pass counts the rows breaking each rule that reads the row alone. ``(rows, the
    non-zero counts by reason, rows without their written uid)``. The pass decodes every listed column, so a damaged
    data page is found here, naming its file."""
    _execute(con, rules.raw_table_sql(schema, plan, view=schema.table), entry)
    if row_pass is not None:
        counts = row_pass.count_row_rules(lambda sql: _execute(con, sql, entry), schema, plan, found, written)
    else:
        result = _execute(con, rules.row_pass_sql(schema, plan, schema.table), entry)
        counts = dict(zip([d[0] for d in result.description], result.fetchone()))
    total = counts.pop("rows")
    without_uid = {uid: counts.pop(rules.rows_without_uid_column(uid)) for uid in plan.written_links}
    return total, {reason: n for reason, n in counts.items() if n}, without_uid


def in_place_counts(con: duckdb.DuckDBPyConnection, pending: RoundsInPlace,
                    aggregates: rules.RoundAggregates) -> dict[str, int]:
    """The in-place strategy's second half: per rule of the rounds that reads other rows,
    the count ``rules.in_place_witness_sql`` reads off ``aggregates`` (zero exactly when
    no round breaks it). The non-zero ones, by reason."""
    schema = load_schemas()["rounds"]
    parents = {ref.table: rules.parents_as_read_sql(ref.table) for ref in schema.references}
    counts = {}
    for rule in rules.table_rules(schema, pending.plan):
        if rule.reads != "row":
            counts[rule.reason] = con.execute(
                rules.in_place_witness_sql(schema, pending.plan, rule, aggregates, parents)).fetchone()[0]
    return {reason: n for reason, n in counts.items() if n}


def confirm_in_place(con: duckdb.DuckDBPyConnection, summary: LoadSummary, aggregates: rules.RoundAggregates,
                     progress: Progress | None = None, counted: dict[str, int] | None = None) -> bool:
    """Settle rounds read in place, once ``aggregates`` exist. Returns True when some rule
    may be broken and the rounds took the exact strategy (then every relation built
    from them must be built again). ``counted``: ``in_place_counts`` already known (the
    cache of the passes keeps them per trace unit), so the aggregates are not read."""
    pending, summary.pending = summary.pending, None
    if pending is None:
        return False
    breaking = in_place_counts(con, pending, aggregates) if counted is None else counted
    if not breaking:
        return False
    if progress:
        progress("rounds may break a rule that reads other rows (" + ", ".join(f"{r} {n}" for r, n in breaking.items())
                 + "): copying the rounds to reject them")
    found, schemas = pending.found, load_schemas()
    summary.rows_read["rounds"], summary.rejected["rounds"] = load_exactly(
        con, schemas["rounds"], pending.plan, found["rounds"], progress)
    summary.rows_clean["rounds"] = con.execute("select count(*) from rounds").fetchone()[0]
    _write_metadata(con, found, schemas, summary.rows_read, summary.rows_clean)
    return True


# The link keys: (parent table, its uid, the id it stands for, the aggregate of the rounds by it)
LINKS = (("requests", "request_uid", "request_id", "per_request"),
         ("steps", "step_uid", "step_id", "per_step"))

LINK_KEYS_DOC = "docs/trace-format.md#link-keys-written-at-the-source"


def written_links(found: dict[str, TableFiles],
                  hashed: frozenset[str] = frozenset()) -> tuple[frozenset[str], list[str]]:
    """The link keys to read from the files rather than hash: those that every file of both
    tables of the link carries (the rounds and the parent, both present), less ``hashed``.
    With the notes for a link key that only some of those files carry."""
    written, notes = set(), []
    for parent, uid, column, _holder in LINKS:
        tables = [found[parent], found["rounds"]]
        files = [(entry.table, path) for entry in tables for path in entry.files]
        carrying = [f for f in files if uid in found[f[0]].file_schemas[f[1]].names]
        if not carrying or uid in hashed:
            continue
        if not all(entry.present for entry in tables):
            continue  # nothing to link: the rounds' uid would group them alone, unchecked
        if len(carrying) == len(files):
            written.add(uid)
            continue
        lacking = next(str(path) for table, path in files if (table, path) not in carrying)
        notes.append(f"{uid} is in {len(carrying)} of the {len(files)} files of {parent} and rounds "
                     f"(not in {lacking}, for one): specan hashed deployment_id, {column} and the shared "
                     f"partition values instead, which gives the same numbers; a written {uid} is used "
                     f"only when every file of both tables has it ({LINK_KEYS_DOC})")
    return frozenset(written), notes


class InvalidLinkKeys(Exception):
    """The link keys a writer stored do not link what the string keys link. Not an error
    of the input: the caller loads again with ``hashed_links`` and adds ``note``."""

    def __init__(self, uid: str, parent: str, problem: str):
        self.uid = uid
        column = LINK_KEYS_COLUMN[uid]
        self.note = (f"the {uid} written in {parent} and rounds is not a valid link key ({problem}): "
                     f"specan hashed deployment_id, {column} and the shared partition values instead, "
                     f"which gives the numbers the string keys give ({LINK_KEYS_DOC})")
        super().__init__(self.note)


LINK_KEYS_COLUMN = {uid: column for _parent, uid, column, _holder in LINKS}


def with_hashed_fallback(run, summary_of, progress: Progress | None = None):
    """``run(hashed_links)`` with no link key hashed that its writer stored; when the
    written ones turn out invalid (``InvalidLinkKeys``), run again with those hashed, and
    the reason as a note of the result's summary (``summary_of(result)``). The second
    run reads the string keys as for a trace without uids: the same numbers."""
    hashed: frozenset[str] = frozenset()
    notes: list[str] = []
    while True:
        try:
            result = run(hashed)
        except InvalidLinkKeys as invalid:
            if invalid.uid in hashed:
                raise InternalError(f"{invalid.uid} was hashed and still found invalid") from None
            if progress:
                progress(f"{invalid.uid} as written is not a valid link key: loading again with hashed keys")
            hashed |= {invalid.uid}
            notes.append(invalid.note)
            continue
        summary_of(result).notes.extend(notes)
        return result


# The checks below return their first offending row in a stated order (the same row on
# every engine, and with or without the cache of the passes: the note it gives is the
# same document), and name what they found by the values in the user's files: the
# deployment, the id and the partition, never the link key as specan reads it (a
# written uid mixed with the partition values, or specan's own hash of the string keys).


def _key_text_sql(column: str, shared: list[str]) -> str:
    """A parent key as the user wrote it: 'deployment_id d, request_id r, date=2026-11-28'."""
    return ("concat_ws(', ', 'deployment_id ' || cast(deployment_id as varchar), "
            f"'{column} ' || cast({rules.q(column)} as varchar), {rules.partition_text_sql(tuple(shared))})")


def parent_collision_sql(found: dict[str, TableFiles], parent: str, uid: str, column: str,
                         relation: str) -> str:
    """The first ``uid`` of the parent rows in ``relation`` that stands for two keys, if
    any: ``(uid, one key, another key)``, the keys as text. The uids are grouped by their
    keys' least and greatest values first; only the rows of a uid found there (none, in a
    sound trace) are written out as text."""
    shared = sorted(p for p in found[parent].partitions if p in found["rounds"].partitions)
    key = [rules.q(c) for c in ("deployment_id", column, *shared)]
    text = _key_text_sql(column, shared)
    return (f"select p.{uid}, min({text}), max({text}) from {relation} as p "
            f"semi join (select {uid} from {relation} group by {uid} having {rules.several_values_sql(key)}) as hit "
            f"on hit.{uid} is not distinct from p.{uid} group by p.{uid} order by 2, 3 limit 1")


def aggregate_collision_sql(uid: str, aggregate: str, column: str) -> str:
    """The first ``uid`` behind which the rounds name two ids (the aggregate's min and max
    differ): ``(deployment_id, the least id, uid)``."""
    c = rules.q(column)
    return (f"select deployment_id, {c}, {uid} from {aggregate} where {uid}_collides "
            f"order by deployment_id, {c}, {uid} limit 1")


def collision(uid: str, value, parent: str, keys: str = "") -> InternalError:
    return InternalError(f"hash collision: {uid} {value} stands for two different {parent} keys{keys}, "
                         "which every number would merge; nothing is reported (please report this)")


def parent_key_uids_sql(found: dict[str, TableFiles], parent: str, uid: str, column: str,
                        relation: str) -> str:
    """The first key of the parent rows in ``relation`` that has two uids, if any: ``(key as
    text,)``. As ``parent_collision_sql``: the keys grouped first, text only for a hit."""
    shared = sorted(p for p in found[parent].partitions if p in found["rounds"].partitions)
    columns = [rules.q(c) for c in ("deployment_id", column, *shared)]
    on = " and ".join(f"hit.{c} is not distinct from p.{c}" for c in columns)
    return (f"select min({_key_text_sql(column, shared)}) from {relation} as p "
            f"semi join (select {', '.join(columns)} from {relation} group by {', '.join(columns)} "
            f"having {rules.several_values_sql([uid])}) as hit on {on} "
            f"group by {', '.join(f'p.{c}' for c in columns)} order by 1 limit 1")


def misdirected_uid_sql(uid: str, column: str, aggregate: str, parents: str) -> str:
    """The first ``uid`` of the rounds (``aggregate``, one row per deployment_id and uid)
    that no parent as read has, or whose parent has another key: the rounds' own key, not
    the uid, names their parent. ``(deployment_id, id, uid)``. Run after the rows are
    clean, when every clean round has a parent by its string key (unknown_* rejects the others)."""
    c = rules.q(column)
    return (f"select a.deployment_id, a.{c}, a.{uid} from {aggregate} as a "
            f"left join (select distinct {uid}, deployment_id, {c} from {parents}) as p "
            f"on p.{uid} = a.{uid} "
            f"where p.{uid} is null or p.deployment_id <> a.deployment_id "
            f"or p.{c} <> a.{c} order by a.deployment_id, a.{c}, a.{uid} limit 1")


# The aggregates check_link_keys reads off the rounds table when no view built them (validate).
ROUNDS_BY_LINK_KEY = rules.RoundAggregates(
    per_request="(select deployment_id, request_uid, min(request_id) as request_id, "
                "min(request_id) <> max(request_id) as request_uid_collides "
                "from rounds group by deployment_id, request_uid)",
    per_step="(select deployment_id, step_uid, min(step_id) as step_id, "
             "min(step_id) <> max(step_id) as step_uid_collides "
             "from rounds where step_uid is not null group by deployment_id, step_uid)")


def check_link_keys(con: duckdb.DuckDBPyConnection, found: dict[str, TableFiles],
                    aggregates: rules.RoundAggregates | None = None, *,
                    written: frozenset[str] = frozenset(), rows_without_uid: dict[str, int] | None = None) -> None:
    """The 64-bit link keys (request_uid, step_uid) must each stand for one key.

    Parents: exactly one join key per uid. Rounds: one id per uid within a
    deployment, read off ``aggregates`` when there are (not under validate). A
    collision of the hash is astronomically rare, but it would merge two requests or
    steps silently, so it stops the run as an internal error (exit 3).

    A link key in ``written`` (stored by the writer) must also be one uid per key among
    the parents, present wherever its id is (``rows_without_uid``), and name each
    round's own parent; the rounds are checked off ``aggregates``, or off the rounds
    table itself. Otherwise ``InvalidLinkKeys``: the caller loads with hashed keys."""
    link_key_checks(lambda sql: con.execute(sql).fetchone(), found, rules.parents_as_read_sql, aggregates,
                    written=written, rows_without_uid=rows_without_uid)


def link_key_checks(fetch: Callable[[str], tuple | None], found: dict[str, TableFiles],
                    parents_of: Callable[[str], str], aggregates: rules.RoundAggregates | None = None, *,
                    written: frozenset[str] = frozenset(), rows_without_uid: dict[str, int] | None = None,
                    rounds: bool = True) -> None:
    """``check_link_keys`` on any engine: ``fetch(sql)`` runs DuckDB SQL (transpiled where
    needed) and returns its first row or None; ``parents_of(table)`` names the parent as
    read. Without ``rounds`` only the parents are checked (the rounds' aggregates come later)."""
    decide_link_keys(link_key_hits(fetch, found, parents_of, aggregates, written=written, rounds=rounds),
                     written=written, rows_without_uid=rows_without_uid)


def link_key_hits(fetch: Callable[[str], tuple | None], found: dict[str, TableFiles],
                  parents_of: Callable[[str], str], aggregates: rules.RoundAggregates | None = None, *,
                  written: frozenset[str] = frozenset(), rounds: bool = True,
                  parents: bool = True) -> dict[str, dict[str, tuple | None]]:
    """What each check of ``link_key_checks`` finds, per link key: the first offending row
    of each query, or None. Without ``parents`` the parents' own checks are left out (the
    cache of the passes keeps a trace unit's rounds' findings, and checks every parent
    on every run); the rounds are always checked against every parent."""
    hits: dict[str, dict[str, tuple | None]] = {}
    for parent, uid, column, holder in LINKS:
        is_written = uid in written
        parents_sql = parents_of(parent)
        found_here: dict[str, tuple | None] = {}
        if parents and found[parent].present:
            found_here["parent_collision"] = fetch(parent_collision_sql(found, parent, uid, column, parents_sql))
            if is_written:
                found_here["parent_key_uids"] = fetch(parent_key_uids_sql(found, parent, uid, column, parents_sql))
        relation = getattr(aggregates, holder) if aggregates is not None else None
        if relation is None and is_written:
            relation = getattr(ROUNDS_BY_LINK_KEY, holder)
        if rounds and relation is not None:
            found_here["aggregate_collision"] = fetch(aggregate_collision_sql(uid, relation, column))
            if is_written:
                found_here["misdirected"] = fetch(misdirected_uid_sql(uid, column, relation, parents_sql))
        hits[uid] = found_here
    return hits


def decide_link_keys(hits: dict[str, dict[str, tuple | None]], *, written: frozenset[str] = frozenset(),
                     rows_without_uid: dict[str, int] | None = None) -> None:
    """Raise what ``hits`` (``link_key_hits``) call for: ``InvalidLinkKeys`` for a written
    link key that cannot stand for its keys, else ``collision`` for a hashed one."""
    rows_without_uid = rows_without_uid or {}
    for parent, uid, column, _holder in LINKS:
        is_written = uid in written
        found_here = hits.get(uid, {})
        missing = rows_without_uid.get(uid) if is_written else 0
        if missing:
            rows = "1 row has" if missing == 1 else f"{missing} rows have"
            raise InvalidLinkKeys(uid, parent, f"{rows} a {column} but no {uid}")
        hit = found_here.get("parent_collision")
        if hit is not None:
            if is_written:
                raise InvalidLinkKeys(uid, parent, f"{hit[1]} and {hit[2]} have one {uid} in {parent}")
            raise collision(uid, hit[0], parent, f" ({hit[1]}; {hit[2]})")
        twice = found_here.get("parent_key_uids") if is_written else None
        if twice is not None:
            raise InvalidLinkKeys(uid, parent, f"{twice[0]} has two {uid}s in {parent}, or rows without one")
        hit = found_here.get("aggregate_collision")
        if hit is not None:
            if is_written:
                raise InvalidLinkKeys(uid, parent, f"rounds of {column} {hit[1]} (deployment_id {hit[0]}) "
                                                   f"share their {uid} with rounds of another {column}")
            raise collision(uid, hit[2], parent, f" (rounds of {column} {hit[1]} of deployment_id {hit[0]} "
                                                 f"and of another)")
        wrong = found_here.get("misdirected") if is_written else None
        if wrong is not None:
            raise InvalidLinkKeys(uid, parent, f"rounds of {column} {wrong[1]} (deployment_id {wrong[0]}) "
                                               f"carry a {uid} that {parent} gives another {column} or none")


def table_plan(entry: TableFiles, schema: TableSchema, found: dict[str, TableFiles],
               written: frozenset[str] = frozenset()) -> rules.TablePlan:
    """What the SQL builders need to know about this table's files (``written``: the link
    keys read from the files, ``written_links``)."""
    def shared(other: str) -> tuple[str, ...]:
        if other == "deployments" or schema.table == "deployments":
            return ()
        # By name, not in this table's folder order: both sides of a join hash them alike.
        return tuple(sorted(p for p in entry.partitions if p in found[other].partitions))

    present = entry.columns_anywhere
    text = {c for path in entry.files for c in schema.column_names
            if c in entry.file_schemas[path].names and _is_text(entry.file_schemas[path].field(c).type)}
    return rules.TablePlan(
        table=schema.table,
        files=tuple(str(p) for p in entry.files),
        partitions=tuple(entry.partitions),
        present_columns=frozenset(c for c in schema.column_names if c in present),
        extra_columns=tuple(sorted(present - set(schema.column_names) - set(entry.partitions))),
        parent_present={t: found[t].present for t in found},
        shared_partitions={t: shared(t) for t in found},
        stop_reason_anywhere="stop_reason" in present if schema.table == "rounds" else True,
        parent_keys={ref.table: _own_key(ref.table, found) for ref in schema.references},
        text_columns=frozenset(text),
        written_links=frozenset(uid for uid in written if uid in schema.link_columns),
    )


def _is_text(arrow_type: pa.DataType) -> bool:
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)


def _own_key(table: str, found: dict[str, TableFiles]) -> tuple[str, ...]:
    """A table's key as read: its key columns, then its partition columns where they are part of it."""
    schema = load_schemas()[table]
    return schema.key + (tuple(sorted(found[table].partitions)) if schema.partitions_in_key else ())


def _execute(con, sql: str, entry: TableFiles):
    try:
        return con.execute(sql)
    except (duckdb.OutOfMemoryException, duckdb.InterruptException):
        raise           # the machine's limits, not the input's fault (exit 3)
    except duckdb.Error as exc:
        culprit = unreadable_file(con, entry)
        if culprit is None:
            raise       # every file decodes: the failure is not the input's (exit 3)
        raise StructuralError(culprit, entry.table, None, f"not readable Parquet ({first_line(exc)})") from None


def decode_error(con, path: str | Path) -> str | None:
    """Why the data pages of the Parquet file ``path`` cannot be decoded (None: they can)."""
    try:
        con.execute("select max(hash(t)) from read_parquet(?) as t", [str(path)]).fetchall()
    except duckdb.Error as exc:
        return first_line(exc)
    return None


def unreadable_file(con, entry: TableFiles) -> Path | None:
    """The first file of ``entry`` whose data pages cannot be decoded (to call after a failed read)."""
    return next((path for path in entry.files if decode_error(con, path) is not None), None)


def name_unreadable_input(con, found: dict[str, TableFiles]) -> None:
    """After a failed query over tables read in place: raise the StructuralError naming the
    first file whose data pages cannot be decoded, if there is one (else return)."""
    for entry in found.values():
        for path in entry.files:
            problem = decode_error(con, path)
            if problem is not None:
                raise StructuralError(path, entry.table, None, f"not readable Parquet ({problem})")


def _write_metadata(con, found, schemas, rows_read, rows_clean) -> None:
    con.execute("""create or replace table trace_tables (
        table_name varchar, present boolean, num_files integer, rows_read bigint, rows_clean bigint)""")
    _insert(con, "trace_tables", [(t, found[t].present, len(found[t].files), rows_read[t], rows_clean[t])
                                  for t in TABLE_ORDER])
    con.execute("""create or replace table trace_columns (
        table_name varchar, column_name varchar, listed boolean, present boolean, partition boolean)""")
    rows = []
    for table in TABLE_ORDER:
        entry, schema = found[table], schemas[table]
        anywhere = entry.columns_anywhere
        for name in schema.column_names:
            rows.append((table, name, True, name in anywhere, name in entry.partitions))
        for name in sorted(anywhere - set(schema.column_names)):
            rows.append((table, name, False, True, name in entry.partitions))
    _insert(con, "trace_columns", rows)


def _insert(con, table: str, rows: list[tuple]) -> None:
    """All rows as one literal statement: executemany costs a statement per row, which
    was a tenth of opening a small trace."""
    if rows:
        values = ", ".join("(" + ", ".join(rules.lit(v) for v in row) + ")" for row in rows)
        con.execute(f"insert into {table} values {values}")


def _load_import_notes(con, traces: Path) -> None:
    """Notes that ``specan import`` left in TRACES/import_notes/, so every report repeats them."""
    files = sorted((traces / "import_notes").rglob("*.parquet")) if (traces / "import_notes").is_dir() else []
    if files:
        listed = "[" + ", ".join(rules.lit(str(f)) for f in files) + "]"
        con.execute(f"create or replace table import_notes as "
                    f"select * from read_parquet({listed}, union_by_name = true)")


def read_summary(con: duckdb.DuckDBPyConnection) -> LoadSummary:
    """The summary of an already loaded database (``specan load`` output)."""
    try:
        meta = con.execute("select table_name, present, rows_read, rows_clean from trace_tables").fetchall()
    except duckdb.Error:
        raise StructuralError(None, "trace_tables", None,
                              "not a specan database: run `specan load TRACES --db FILE` first") from None
    rejected: dict[str, dict[str, int]] = {t: {} for t, *_ in meta}
    # reduced traces bring back a few rejected rows per reason and the counts of all of them
    counted = "rejected_counts" if _has_relation(con, "rejected_counts") else \
        "(select table_name, reason, count(*) as num_rows from rejected_rows group by all)"
    for table, reason, n in con.execute(
            f"select table_name, reason, num_rows from {counted} order by all").fetchall():
        rejected.setdefault(table, {})[reason] = n
    return LoadSummary(
        rows_read={t: r for t, _, r, _ in meta},
        rows_clean={t: c for t, _, _, c in meta},
        present={t: p for t, p, _, _ in meta},
        rejected=rejected,
    )


def _has_relation(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """A table or view of that name, temporary ones included."""
    return con.execute("select count(*) from information_schema.tables where table_name = ?", [name]).fetchone()[0] > 0
