"""The passes over the rounds, computed per trace unit and kept in the cache.

A report's heavy work is a few passes over the rounds (the materialised views that
read ``rounds`` through plain views only: ``request_rounds``, ``step_rounds``,
``round_group_cells``, ``request_gaps_unpacked``). Everything else is computed from
their small results. This module computes those passes one *trace unit* at a time,
keeps each unit's results in the cache (``cache_store``), and merges the units'
results into the tables the views would have built (docs/performance.md, "The
cache of the passes").

A trace unit is one partition (``date=2026-11-28``) of the partition columns the
rounds, the requests and the steps share (``shared_partition_columns``: rounds under
``date=…/dep=…/`` beside requests under ``date=…/`` give dates): every key and link
key then holds those partition values (``ingest.rules``, "Join keys"), so no rule
and no pass relates rows of two units, and a unit's results depend only on its own
files (and on the deployments of its partition, or all of them when the
deployments are not partitioned by those columns). Without shared partition
columns the whole trace is one unit.

Exact by construction:

- a unit's key hashes every input its results depend on: its files (path, size,
  modification time, inode, status change time, Parquet footer), the deployments files its parents' rules read, the shape of
  every table as found (columns present anywhere, partitions, link keys written),
  specan's code, SQL and schemas, DuckDB's version and the n-gram length;
- each pass declares how its units merge (``sql/materialized.toml``, ``[partials]``):
  ``union`` for a grain that holds a link key (per request, per step, per gap: a
  unit's rows are all the rows of those keys; checked: two units giving one key
  falls back to reading the files), ``sum`` for cells (counts and exact sums added,
  least and greatest kept), each column cast back to its type;
- the row rules that read a row alone are counted per unit, and so are the rules
  that read other rows (unknown and ambiguous parents, duplicates, order: the unit's
  aggregates against every parent as read) and the link keys' checks of its rounds
  (against every parent); all are kept in the entry. Each count is zero in every unit exactly when it is zero over the merged
  tables, since a unit's keys are its own. The parents' own checks of the link keys
  run over every parent on every run (parents may sit in partitions without rounds,
  in no unit). A break sends the run down the exact path without the cache (``ingest.load``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from .. import __version__
from ..errors import first_line
from ..ingest import rules
from ..ingest.load import (RoundsInPlace, TableFiles, decide_link_keys, in_place_counts, link_key_hits,
                           table_plan)
from ..ingest.schema import TableSchema, load_schemas
from ..resources import resource_dir
from .cache_store import CacheUnusable, Entry, Store, file_digest
from .views import MATERIALIZED_FILE, ROUND_AGGREGATES, View, ViewError

Progress = Callable[[str], None]

# the tables whose files a unit's passes read (the deployments through the parents' rules)
UNIT_TABLES = ("rounds", "requests", "steps")


class CacheFallback(Exception):
    """The merged units cannot stand for one pass over the files (two units gave one key):
    the caller opens the traces again without the cache."""


@dataclass(frozen=True)
class Merge:
    """How a pass's per-unit tables combine (``[partials]`` in sql/materialized.toml)."""

    how: str                          # "union" or "sum"
    key: tuple[str, ...]              # union: the columns unique per row; sum: the cell's columns
    least: tuple[str, ...] = ()       # sum: columns kept as their least
    greatest: tuple[str, ...] = ()    # sum: columns kept as their greatest
    unique: bool = False              # union: one row per key (checked across units)


def declared_merges(sql_dir: Path | None = None) -> dict[str, Merge]:
    path = (sql_dir or resource_dir("sql")) / MATERIALIZED_FILE
    try:
        declared = tomllib.loads(path.read_text(encoding="utf-8")).get("partials", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ViewError(f"{path}: {exc}") from None
    merges = {}
    for name, spec in declared.items():
        how = spec.get("merge")
        if how not in ("union", "sum") or not spec.get("key"):
            raise ViewError(f"{path}: [partials.{name}] needs merge = \"union\" or \"sum\" and a key")
        merges[name] = Merge(how, tuple(spec["key"]), tuple(spec.get("least", ())), tuple(spec.get("greatest", ())),
                             bool(spec.get("unique", False)))
    return merges


def round_passes(views: dict[str, View], order: list[str], declared: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """The materialised views that read the rounds through plain views only, and those of
    ``declared`` (the ``[partials]``) that read only such passes, in creation order."""
    def reads_rounds(name: str) -> bool:
        refs = views[name].references
        return "rounds" in refs or any(r in views and not views[r].materialized and reads_rounds(r) for r in refs)

    passes: list[str] = []
    for name in order:
        if not views[name].materialized:
            continue
        if reads_rounds(name):
            passes.append(name)
        elif name in declared:
            later = sorted(r for r in views[name].references
                           if r in views and views[r].materialized and r not in passes)
            if later:
                raise ViewError(f"sql/{MATERIALIZED_FILE}: [partials.{name}] reads {', '.join(later)}, "
                                "which is not computed per trace unit")
            passes.append(name)
    return passes


def plain_inputs(views: dict[str, View], order: list[str], passes: list[str]) -> list[str]:
    """The plain views the passes read (directly or through plain views), in creation order."""
    needed: set[str] = set()
    stack = list(passes)
    while stack:
        for ref in views[stack.pop()].references:
            if ref in views and not views[ref].materialized and ref not in needed:
                needed.add(ref)
                stack.append(ref)
    return [n for n in order if n in needed]


# ---------------------------------------------------------------------------- units and keys


@dataclass(frozen=True)
class Unit:
    """One partition of the rounds (``partition``: (column, value) pairs; () for the whole trace)."""

    partition: tuple[tuple[str, str], ...]
    key: str

    @property
    def label(self) -> str:
        return ", ".join(f"{c}={v}" for c, v in self.partition) or "the whole trace"

    def filter_sql(self) -> str:
        return " and ".join(f'{rules.q(c)} = {_literal(v)}' for c, v in self.partition) or "true"


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A hash of specan's code, SQL and schemas: any change to what computes a number is a new key."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    paths = sorted(package.rglob("*.py")) + sorted(resource_dir("sql").rglob("*")) + sorted(
        resource_dir("schemas").rglob("*"))
    for path in paths:
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _canonical(value):
    """Plans as JSON that does not depend on set order or on the files listed."""
    if dataclasses.is_dataclass(value):
        return {f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value) if f.name != "files"}
    if isinstance(value, (set, frozenset)):
        return sorted(_canonical(v) for v in value)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def _fingerprint(path: Path) -> list:
    """What identifies a file's content without reading its data (docs/commands.md, "The
    cache of the passes"): its path, size and modification time; its inode and status
    change time, which a rewrite changes even when it keeps the size and sets the
    modification time back (``os.utime``, ``cp -p``, ``rsync -a``, a restored archive);
    and a digest of its Parquet footer (row groups, their sizes and statistics)."""
    info = path.stat()
    return [str(path.resolve()), info.st_size, info.st_mtime_ns, info.st_ino, info.st_ctime_ns, _footer_digest(path)]


def _footer_digest(path: Path) -> str:
    """SHA-256 of the file's Parquet footer (its last bytes: the footer, its length, PAR1)."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        if size < 8:
            return ""
        f.seek(size - 8)
        tail = f.read(8)
        length = min(int.from_bytes(tail[:4], "little"), size - 8)
        f.seek(size - 8 - length)
        return hashlib.sha256(f.read(length) + tail).hexdigest()


def shared_partition_columns(found: dict[str, TableFiles]) -> list[str]:
    """The columns a trace unit is a partition of: those the rounds, the requests and the
    steps (the tables present) are all partitioned by, every file of each carrying them.
    With rounds under ``rounds/date=…/dep=…/`` and requests and steps under ``date=…/``,
    a unit is a date. Every key holds its table's partition values and every join
    matches the partition columns two tables share (``ingest.rules``, "Join keys"), so a
    round, its request, its step and the rounds a rule compares it with are all in its
    unit. [] (the whole trace is one unit) when they share none."""
    tables = ["rounds"] + [t for t in ("requests", "steps") if found[t].present]
    shared = set(found["rounds"].partitions)
    for table in tables[1:]:
        shared &= set(found[table].partitions)
    return sorted(shared) if shared and all(_in_every_file(found[t], shared) for t in tables) else []


def _in_every_file(entry: TableFiles, columns) -> bool:
    """Whether every file of a table sits under a partition folder of each of ``columns``."""
    return all(set(columns) <= set(entry.file_partitions[p]) for p in entry.files)


def plan_units(found: dict[str, TableFiles], plans: dict[str, rules.TablePlan], repeat_n: int,
               deployments_digest: str = "") -> list[Unit]:
    """The trace's units, each with its key. ``deployments_digest``: a hash of the clean
    deployments table, which passes read (cost_steps: a deployment's method), and which a
    new date's deployments file may change."""
    partitions = shared_partition_columns(found)
    shared = {
        "specan": __version__,
        "code": code_digest(),
        "duckdb": duckdb.__version__,
        "repeat_n": repeat_n,
        "deployments": deployments_digest,
        "partitions": partitions,
        "plans": {t: _canonical(p) for t, p in sorted(plans.items())},
    }
    # deployments partitioned by (at least) the unit's columns: a unit's rounds can only name
    # the deployments of its own partition (a join matches every partition column shared)
    deployments_alike = bool(partitions) and _in_every_file(found["deployments"], partitions)

    def files_of(table: str, values: dict[str, str] | None) -> list[list]:
        entry = found[table]
        return [_fingerprint(p) for p in sorted(entry.files)
                if values is None or {k: entry.file_partitions[p].get(k) for k in values} == values]

    values_list = sorted({tuple((c, found["rounds"].file_partitions[p][c]) for c in partitions)
                          for p in found["rounds"].files}) if partitions else [()]
    units = []
    for values in values_list:
        own = dict(values) if values else None
        inputs = {t: files_of(t, own) for t in UNIT_TABLES}
        inputs["deployments"] = files_of("deployments", own if deployments_alike else None)
        text = json.dumps({"shared": shared, "unit": list(map(list, values)), "inputs": inputs}, sort_keys=True)
        units.append(Unit(tuple(values), hashlib.sha256(text.encode()).hexdigest()[:40]))
    return units


# ---------------------------------------------------------------------------- the cached passes


@dataclass
class CacheStats:
    """What the cache did in one run (``--profile`` and the progress lines show it)."""

    folder: str = ""
    units: int = 0
    read: int = 0
    computed: int = 0
    written: int = 0
    evicted: int = 0
    unused_because: str | None = None
    problems: list[str] = field(default_factory=list)
    # where the rules that read other rows and the link keys' checks ran: "per unit" (the
    # new units', the others' kept) or "merged" (once, over the merged tables)
    checks: str = ""
    # a first run's units split off one pass over every file (not computed one by one)
    split: bool = False

    def line(self) -> str:
        if self.unused_because:
            return f"cache not used: {self.unused_because}"
        return (f"cache {self.folder}: {self.read} of {self.units} trace unit{'s' if self.units != 1 else ''} read, "
                f"{self.computed} computed, {self.written} written, {self.evicted} evicted")


class CachedPasses:
    """The hooks the load (``count_row_rules``) and the views (``build``) call."""

    def __init__(self, store: Store, repeat_n: int, progress: Progress | None = None):
        self.store = store
        self.repeat_n = repeat_n
        self.say = progress or (lambda _msg: None)
        self.stats = CacheStats(folder=str(store.folder))
        self.units: list[Unit] = []
        self.entries: dict[str, object] = {}
        self.row_counts: dict[str, dict[str, int]] = {}
        self.witness: dict[str, dict[str, int]] = {}
        self.link_hits: dict[str, dict[str, dict]] = {}
        self.written: frozenset[str] = frozenset()
        self.built = False
        self.attached: list[str] = []        # the entries' databases, attached for the workspace's life
        self.merged_views: list[str] = []
        self.per_unit = False
        self.deferred: dict[str, Path] = {}  # written, kept once the caller's checks found nothing
        self.passes: list[str] = []
        self.partitioned = False
        self.plan: rules.TablePlan | None = None
        self.found: dict[str, TableFiles] = {}
        # a first run's units, split off one pass and written off the report's path
        self.writer: threading.Thread | None = None
        self.split_written: dict[str, Path] = {}
        self.approved = False

    # -- the load's hook: the row rules that read a row alone, per unit

    def count_row_rules(self, execute, schema: TableSchema, plan: rules.TablePlan,
                        found: dict[str, TableFiles], written: frozenset[str]) -> dict[str, int]:
        """The row pass's counts (``rules.row_pass_sql``'s columns) over every unit: a
        unit read before gives its kept counts, the others are counted in one pass."""
        schemas = load_schemas()
        plans = {t: table_plan(found[t], schemas[t], found, written) for t in ("deployments", *UNIT_TABLES)}
        self.plan, self.found, self.written = plan, found, written
        # the deployments are loaded before the rounds: their content, as the passes read it
        digest = execute("select md5(coalesce(string_agg(d::varchar, chr(31) order by d::varchar), '')) "
                         "from deployments as d").fetchone()[0]
        self.units = plan_units(found, plans, self.repeat_n, digest)
        self.partitioned = bool(self.units and self.units[0].partition)
        self.stats.units = len(self.units)
        with self.store.reading():
            for unit in self.units:
                entry = self.store.get(unit.key)
                if entry is not None and all(isinstance(entry.manifest.get(k), dict)
                                             for k in ("row_pass", "witness", "link_hits")):
                    self.entries[unit.key] = entry
                    self.row_counts[unit.key] = entry.manifest["row_pass"]
                    self.witness[unit.key] = entry.manifest["witness"]
                    self.link_hits[unit.key] = entry.manifest["link_hits"]
        for key in self.store.drop_damaged():
            self.stats.problems.append(f"deleted a damaged cache entry ({key}): its unit is read from the files")
        self.stats.read = len(self.entries)
        new = [u for u in self.units if u.key not in self.entries]
        if new:
            self.say(f"reading rounds of {len(new)} trace unit{'s' if len(new) != 1 else ''} "
                     f"({len(self.entries)} from the cache): counting row-rule breaks")
            if self.partitioned:
                unit_of = " ".join(f"when {u.filter_sql()} then {i}" for i, u in enumerate(new))
                where = " or ".join(f"({u.filter_sql()})" for u in new)
                relation = f"(select *, case {unit_of} end as _specan_unit from {schema.table} where {where})"
            else:
                relation = f"(select *, 0 as _specan_unit from {schema.table})"
            result = execute(rules.row_pass_sql(schema, plan, relation, group_by="_specan_unit"))
            names = [d[0] for d in result.description][1:]
            by_unit = {row[0]: {k: int(n) for k, n in zip(names, row[1:])} for row in result.fetchall()}
            empty = dict.fromkeys(names, 0)
            for index, unit in enumerate(new):
                self.row_counts[unit.key] = by_unit.get(index, empty)
            self._check_rows_found(new)
        total: dict[str, int] = {}
        for counts in self.row_counts.values():
            for name, n in counts.items():
                total[name] = total.get(name, 0) + n
        return total

    def _check_rows_found(self, new: list[Unit]) -> None:
        """Each unit's filter found exactly its files' rows (the footers' counts): else a
        partition value does not read back as written, and units cannot be told apart."""
        if not self.partitioned:
            return
        entry = self.found["rounds"]
        for unit in new:
            values = dict(unit.partition)
            in_files = sum(pq.read_metadata(p).num_rows for p in entry.files
                           if {k: entry.file_partitions[p].get(k) for k in values} == values)
            if in_files != self.row_counts[unit.key]["rows"]:
                raise CacheFallback(f"the rounds of {unit.label} read back as {self.row_counts[unit.key]['rows']} "
                                    f"rows, its files hold {in_files}")

    # -- the views' hook: the passes, from the cache or per unit, merged

    def build(self, con: duckdb.DuckDBPyConnection, views: dict[str, View], order: list[str],
              create: Callable[[View], None]) -> set[str]:
        """Create the passes (and the plain views they read) in ``con``; return their names."""
        merges = declared_merges()
        passes = round_passes(views, order, set(merges))
        missing = [p for p in passes if p not in merges]
        if missing:
            raise ViewError(f"sql/{MATERIALIZED_FILE}: pass over the rounds {', '.join(missing)} has no "
                            "[partials] entry saying how its per-unit results merge")
        plain = plain_inputs(views, order, passes)
        for name in plain:
            create(views[name])
        new = [u for u in self.units if u.key not in self.entries]
        # The findings of the rules that read other rows and of the link keys' checks, per new
        # unit against every parent as read (few new units beside kept ones: a re-run), or once
        # over the merged tables by the caller (a first run: as without the cache). Zero over the
        # merged tables is zero in every unit, so its entries are kept with none, once the
        # caller found none (commit); a unit's own findings are zero in every unit exactly when
        # zero over the merged tables, since a unit's keys are its own.
        self.per_unit = bool(self.entries) and len(new) <= len(self.units) // 2
        self.stats.checks = "per unit" if self.per_unit else "merged"
        splits = None if self.per_unit else self._splits(con, views, passes, merges)
        if splits is not None:
            # A first run (or most units new): the passes once over every file, exactly as
            # without the cache, and each new unit's rows split off those tables (a unit is a
            # union of partitions, and every row of a pass belongs to one: its key's, or its
            # request_partition's). 31 passes over 31 dates cost about twice one pass.
            for name in passes:
                create(views[name], shared=True)
            self._start_writer(con, new, views, passes, splits)
            self.stats.computed = len(new)
            self.stats.split = True
            self.passes = passes
            self.built = True
            return set(plain) | set(passes)
        for index, unit in enumerate(new, 1):
            self.say(f"computing the passes over the rounds of {unit.label} ({index} of {len(new)})")
            with self._unit_inputs(con, unit):
                for name in passes:
                    create(views[name])
            written = self._write(con, unit, passes)
            if self.per_unit:
                self.witness[unit.key] = in_place_counts(con, RoundsInPlace(self.found, self.plan),
                                                         ROUND_AGGREGATES)
                self.link_hits[unit.key] = _jsonable(link_key_hits(
                    lambda sql: con.execute(sql).fetchone(), self.found, rules.parents_as_read_sql,
                    ROUND_AGGREGATES, written=self.written, parents=False))
                if written is not None:
                    self._put(unit, written)
            elif written is not None:
                self.deferred[unit.key] = written
        self.stats.computed = len(new)
        if not (len(self.units) == 1 and new):     # else the one unit's tables are the tables
            self._merge(con, passes, merges)
        self.passes = passes
        self.built = True
        return set(plain) | set(passes)

    def _splits(self, con: duckdb.DuckDBPyConnection, views: dict[str, View], passes: list[str],
                merges: dict[str, Merge]) -> dict[str, str] | None:
        """How each pass's rows are told apart by unit, when all of them can be: ``requests``
        or ``steps`` (a union keyed by a request or a step: the unit of its parent as read,
        rejected rows included), ``partition`` (cells keyed by ``request_partition``: the
        unit of those partition values) or ``recompute`` (a pass that reads only passes:
        computed again over the unit's rows of those). None (each unit is computed on its
        own) for one unit, a trace without requests or steps, or rejected requests or steps
        (a clean round of a rejected request has no request_partition)."""
        if not self.partitioned or len(self.units) < 2 or not all(self.found[t].present for t in ("requests", "steps")):
            return None
        for table in ("requests", "steps"):
            try:
                if con.execute(f"select count(*) from _rejected_copy_{table}").fetchone()[0]:
                    return None
            except duckdb.CatalogException:
                return None
        splits = {}
        for name in passes:
            merge = merges[name]
            inputs = views[name].references & (views.keys() | set(UNIT_TABLES))
            if "request_partition" in merge.key:
                splits[name] = "partition"
            elif merge.how == "union" and "request_uid" in merge.key:
                splits[name] = "requests"
            elif merge.how == "union" and "step_uid" in merge.key:
                splits[name] = "steps"
            elif inputs and inputs <= set(passes[:passes.index(name)]):
                splits[name] = "recompute"
            else:
                return None
        return splits

    def _start_writer(self, con: duckdb.DuckDBPyConnection, new: list[Unit], views: dict[str, View],
                      passes: list[str], splits: dict[str, str]) -> None:
        """Split and write the new units off the report's path: on a connection of its own, in
        a thread, while the report goes on over the same tables (``finish`` waits for it). The
        unit of every request, step and request partition is worked out here, as tables that
        connection can read (the workspace's temporary objects are its own)."""
        unit_of = "case " + " ".join(f"when {u.filter_sql()} then {i}" for i, u in enumerate(new)) + " end"
        for table, uid in (("requests", "request_uid"), ("steps", "step_uid")):
            con.execute(f"create or replace table _specan_unit_{table} as select deployment_id, {uid}, "
                        f"{unit_of} as unit from {rules.parents_as_read_sql(table)} as p")
        con.execute("create or replace table _specan_unit_partitions as select distinct p.partition, u.unit "
                    "from request_partitions as p join _specan_unit_requests as u using (request_uid)")
        cursor = con.cursor()
        self.writer = threading.Thread(target=self._write_splits, args=(cursor, new, views, passes, splits),
                                       name="specan-cache-writer", daemon=True)
        self.writer.start()

    def _write_splits(self, con: duckdb.DuckDBPyConnection, new: list[Unit], views: dict[str, View],
                      passes: list[str], splits: dict[str, str]) -> None:
        """Write each new unit's rows of the passes (the tables of one pass over every file) to
        a database of its own, kept once the caller's checks find nothing (``commit``).
        Every row of a split pass must land in exactly one unit: else nothing is kept. Runs in
        the writer thread on a connection of its own: a failure is a problem said, never the
        report's."""
        try:
            self._write_splits_on(con, new, views, passes, splits)
        except Exception as exc:            # in a thread of its own: said, never raised
            self.stats.problems.append(f"kept no trace unit ({first_line(exc)})")
            for target in self.split_written.values():
                self.store.discard(target)
            self.split_written.clear()
        finally:
            con.close()

    def _write_splits_on(self, con: duckdb.DuckDBPyConnection, new: list[Unit], views: dict[str, View],
                         passes: list[str], splits: dict[str, str]) -> None:
        select = {
            "requests": "select x.* from \"{name}\" as x semi join _specan_unit_requests as u "
                        "on u.deployment_id = x.deployment_id and u.request_uid = x.request_uid and u.unit = {i}",
            "steps": "select x.* from \"{name}\" as x semi join _specan_unit_steps as u "
                     "on u.deployment_id = x.deployment_id and u.step_uid = x.step_uid and u.unit = {i}",
            "partition": "select x.* from \"{name}\" as x semi join _specan_unit_partitions as u "
                         "on u.partition = x.request_partition and u.unit = {i}",
        }
        # a pass that reads only passes: its own SQL over the unit's rows of them, under their names
        for name in passes:
            if splits[name] == "recompute":
                shadow = ", ".join(f'"{r}" as (select * from _specan_split."{r}")'
                                   for r in sorted(views[name].references & set(passes)))
                select[name] = f"with {shadow} select * from (\n{views[name].sql}\n)"
        split_rows = {name: 0 for name in passes if splits[name] != "recompute"}
        written = self.split_written
        try:
            for i, unit in enumerate(new):
                target = self.store.new_database()
                try:
                    con.execute(f"attach '{target}' as _specan_split")
                    try:
                        for name in passes:
                            sql = select[name] if splits[name] == "recompute" else \
                                select[splits[name]].format(name=name, i=i)
                            con.execute(f'create table _specan_split."{name}" as {sql}')
                            if name in split_rows:
                                split_rows[name] += con.execute(
                                    f'select count(*) from _specan_split."{name}"').fetchone()[0]
                    finally:
                        con.execute("detach _specan_split")
                except (OSError, duckdb.IOException) as exc:
                    self.store.discard(target)
                    self.stats.problems.append(f"could not keep {unit.label} in the cache ({exc})")
                    continue
                written[unit.key] = target
            in_tables = {name: con.execute(f'select count(*) from "{name}"').fetchone()[0] for name in split_rows}
            lost = [f"{name} ({in_tables[name]} rows, {n} in units)" for name, n in split_rows.items()
                    if n != in_tables[name]]
            if lost and written:
                # a row in no unit (or in two): keeping these would give a later run other tables
                self.stats.problems.append("kept no trace unit: rows of one pass over every file are in no "
                                           f"unit or in two: {', '.join(lost)}")
                for target in written.values():
                    self.store.discard(target)
                written.clear()
        finally:
            for table in ("requests", "steps", "partitions"):
                con.execute(f"drop table if exists _specan_unit_{table}")

    def commit(self) -> None:
        """The caller's checks over the merged tables found nothing: keep the deferred units
        (with no findings), then bound the folder; with the writer still at work, ``finish``
        does that."""
        self.approved = True
        if self.writer is not None:
            return
        self._keep_deferred()

    def finish(self) -> None:
        """Wait for the writer (before the workspace's connection closes), then keep what it
        wrote if the run's checks found nothing (``commit``), else none of it."""
        if self.writer is None:
            return
        if self.writer.is_alive():
            self.say(f"keeping {self.stats.computed} trace units in the cache")
        self.writer.join()
        self.writer = None
        self.deferred.update(self.split_written)
        self.split_written = {}
        if self.approved:
            self._keep_deferred()
        else:
            self.abandon()

    def _keep_deferred(self) -> None:
        for unit in self.units:
            written = self.deferred.pop(unit.key, None)
            if written is not None:
                self.witness[unit.key], self.link_hits[unit.key] = {}, {}
                self._put(unit, written)
        try:
            self.stats.evicted += len(self.store.evict())
        except OSError as exc:
            self.stats.problems.append(str(exc))

    def abandon(self) -> None:
        """The run did not take the units' tables (a rule broken, link keys refused): keep none
        of the deferred units."""
        self.approved = False
        if self.writer is not None:
            self.finish()
            return
        for written in self.deferred.values():
            self.store.discard(written)
        self.deferred.clear()

    def witnessed(self) -> dict[str, int] | None:
        """The non-zero counts of the rounds' rules that read other rows, summed over the
        units (None when the passes were not built from units)."""
        if not (self.built and self.per_unit):
            return None
        total: dict[str, int] = {}
        for counts in self.witness.values():
            for reason, n in counts.items():
                total[reason] = total.get(reason, 0) + n
        return {reason: n for reason, n in total.items() if n}

    def check_link_keys(self, con: duckdb.DuckDBPyConnection, rows_without_uid: dict[str, int]) -> bool:
        """``ingest.load.check_link_keys`` with the rounds' findings read from the units
        (each unit's first offending row; the least of them is the one a pass over the
        merged tables finds, since every check orders its rows) and the parents' own checks
        run here, over every parent as read: they are cheap, and parents may sit in
        partitions that have no rounds, which are in no unit. False when the passes were
        not built from units or are checked over the merged tables (the caller checks the
        usual way)."""
        if not (self.built and self.per_unit):
            return False
        hits = link_key_hits(lambda sql: con.execute(sql).fetchone(), self.found, rules.parents_as_read_sql,
                             written=self.written, rounds=False)
        for unit in self.units:
            for uid, found_here in self.link_hits[unit.key].items():
                merged = hits.setdefault(uid, {})
                for check, row in found_here.items():
                    if row is not None and (merged.get(check) is None or list(row) < list(merged[check])):
                        merged[check] = row
                    else:
                        merged.setdefault(check, None)
        decide_link_keys(hits, written=self.written, rows_without_uid=rows_without_uid)
        return True

    @contextlib.contextmanager
    def _unit_inputs(self, con: duckdb.DuckDBPyConnection, unit: Unit) -> Iterator[None]:
        """While open, ``rounds``, ``requests`` and ``steps`` hold ``unit``'s partition only."""
        if not self.partitioned:
            yield
            return
        schema = load_schemas()["rounds"]
        con.execute(rules.raw_table_sql(schema, self.plan, view="_specan_rounds_files"))
        con.execute(f"create or replace view rounds as select * from _specan_rounds_files where {unit.filter_sql()}")
        renamed = []
        try:
            for table in ("requests", "steps"):
                if self.found[table].present:
                    con.execute(f"alter table {table} rename to _specan_{table}_all")
                    renamed.append(table)
                    con.execute(f"create view {table} as select * from _specan_{table}_all where {unit.filter_sql()}")
            yield
        finally:
            for table in renamed:
                con.execute(f"drop view if exists {table}")
                con.execute(f"alter table _specan_{table}_all rename to {table}")
            con.execute(rules.raw_table_sql(schema, self.plan, view="rounds"))
            con.execute("drop view if exists _specan_rounds_files")

    def _write(self, con: duckdb.DuckDBPyConnection, unit: Unit, passes: list[str]) -> Path | None:
        """Write the unit's pass tables (now in ``con``) to a new database in the cache folder,
        which the merge reads; None when it cannot be written (its tables are copied aside)."""
        target = self.store.new_database()
        try:
            con.execute(f"attach '{target}' as _specan_new")
            try:
                for name in passes:
                    con.execute(f'create table _specan_new."{name}" as select * from "{name}"')
            finally:
                con.execute("detach _specan_new")
            self.entries[unit.key] = Entry(unit.key, target, {})
            return target
        except (OSError, duckdb.IOException) as exc:
            self.store.discard(target)
            self.stats.problems.append(f"could not keep {unit.label} in the cache ({exc})")
        index = self.units.index(unit)
        for name in passes:
            con.execute(f'create or replace temp table "_specan_unit_{index}_{name}" as select * from "{name}"')
        self.entries[unit.key] = None
        return None

    def _put(self, unit: Unit, written: Path) -> None:
        """Rename a written database into place as the unit's entry, with its manifest."""
        try:
            self.store.put(unit.key, written, {
                "unit": unit.label, "row_pass": self.row_counts[unit.key], "witness": self.witness[unit.key],
                "link_hits": self.link_hits[unit.key], "specan": __version__, "passes": self.passes,
                "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            self.stats.written += 1
            self.entries[unit.key] = self.store.get(unit.key) or Entry(unit.key, written, {})
        except OSError as exc:
            self.store.discard(written)
            self.stats.problems.append(f"could not keep {unit.label} in the cache ({exc})")

    def _merge(self, con: duckdb.DuckDBPyConnection, passes: list[str], merges: dict[str, Merge]) -> None:
        """The passes' tables from the units': a union is a view over the entries (attached
        read-only for the workspace's life: nothing is copied), a sum a table of the cells."""
        self.say(f"merging the passes of {len(self.units)} trace units")
        sources: dict[str, list[str]] = {name: [] for name in passes}
        try:
            for index, unit in enumerate(self.units):
                entry = self.entries[unit.key]
                if entry is None:
                    for name in passes:
                        sources[name].append(f'"_specan_unit_{index}_{name}"')
                    continue
                alias = f"_specan_u{index}"
                try:
                    con.execute(f"attach '{entry.database}' as {alias} (read_only)")
                except duckdb.Error as exc:
                    # removed by another run's size bound since it was looked up, or damaged
                    # since its digest was checked: it is deleted, and this run reads the files
                    self.store.drop(unit.key, entry.manifest or None)
                    raise CacheFallback(f"the cache entry of {unit.label} cannot be opened "
                                        f"({str(exc).splitlines()[0]})") from None
                self.attached.append(alias)
                for name in passes:
                    sources[name].append(f'{alias}."{name}"')
            for name in passes:
                union = " union all ".join(f"select * from {s}" for s in sources[name])
                merge = merges[name]
                con.execute(f'drop table if exists "{name}"')    # the last unit's, computed here
                if merge.how == "union":
                    keys = ", ".join(rules.q(c) for c in merge.key)
                    con.execute(f'create temp view "{name}" as {union}')
                    self.merged_views.append(name)
                    if merge.unique and len(sources[name]) > 1 and con.execute(
                            f'select 1 from "{name}" group by {keys} having count(*) > 1 limit 1').fetchone():
                        raise CacheFallback(f"two trace units give {name} rows of one ({', '.join(merge.key)})")
                else:
                    columns = con.execute(f"describe select * from {sources[name][0]}").fetchall()
                    con.execute(f'create temp table "{name}" as '
                                f'select {_sum_columns(merge, columns)} from ({union}) '
                                f'group by {", ".join(rules.q(c) for c in merge.key)}')
        except duckdb.Error as exc:
            # an entry's blocks could not be read (they were checked against its digest when
            # it was looked up: damaged since): delete the entries that no longer match, read the files
            self.release(con)
            damaged = [u.label for u in self.units if self._drop_if_damaged(u.key)]
            raise CacheFallback(f"reading the cache entries failed ({str(exc).splitlines()[0]})"
                                + (f"; deleted the damaged entries of {', '.join(damaged)}" if damaged else "")) \
                from None
        except BaseException:
            self.release(con)
            raise

    def _drop_if_damaged(self, key: str) -> bool:
        """Delete ``key``'s entry if its database no longer hashes to its manifest's digest."""
        entry = self.entries.get(key)
        if not isinstance(entry, Entry) or not entry.manifest:
            return False
        try:
            intact = file_digest(entry.database) == entry.manifest.get("database_sha256")
        except OSError:
            intact = False
        return not intact and self.store.drop(key, entry.manifest)

    def release(self, con: duckdb.DuckDBPyConnection) -> None:
        """Drop the merged views and detach the entries (before the passes are built again
        without the cache: the exact path), and the tables of a first run's one pass, once its
        writer has stopped (it reads them)."""
        self.abandon()
        if self.stats.split:
            for name in self.passes:
                con.execute(f'drop table if exists main."{name}"')
        for name in self.merged_views:
            con.execute(f'drop view if exists "{name}"')
        for alias in self.attached:
            con.execute(f"detach database if exists {alias}")
        for table in con.execute("select table_name from duckdb_tables() "
                                 "where table_name like '\\_specan\\_unit\\_%' escape '\\'").fetchall():
            con.execute(f'drop table "{table[0]}"')
        self.merged_views, self.attached = [], []


def _jsonable(hits: dict[str, dict[str, tuple | None]]) -> dict[str, dict[str, list | None]]:
    """Findings as the manifest keeps them (a row as a list; ids that are not text or numbers as text)."""
    return {uid: {check: None if row is None else [v if isinstance(v, (int, float, str)) or v is None else str(v)
                                                   for v in row]
                  for check, row in found_here.items()}
            for uid, found_here in hits.items()}


def _sum_columns(merge: Merge, columns: list[tuple]) -> str:
    out = []
    for name, column_type, *_ in columns:
        c = rules.q(name)
        if name in merge.key:
            out.append(c)
        elif name in merge.least:
            out.append(f"min({c}) as {c}")
        elif name in merge.greatest:
            out.append(f"max({c}) as {c}")
        else:
            out.append(f"cast(sum({c}) as {column_type}) as {c}")
    return ", ".join(out)


def open_store(cache_dir: Path, max_bytes: int) -> tuple[Store | None, str | None]:
    """The store, or None and why it cannot be used."""
    try:
        return Store(Path(cache_dir), max_bytes), None
    except CacheUnusable as exc:
        return None, str(exc)


