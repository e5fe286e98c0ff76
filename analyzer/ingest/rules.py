"""SQL for the raw → clean step: casts, defaults, and the row rules, defined once.

Every statement here is generated from a table's schema (``schemas/*.json``)
and a ``TablePlan`` describing the files actually found, because the columns
present and the Hive partition columns are only known at load time.

The row rules (docs/trace-format.md, "Row rules") have one definition:
``classification_sql``, every row of a table with the first rule it breaks
(``_reason``; null: the row is clean). ``table_rules`` lists the rules in the
order they are applied:

- ``null_required`` first, then ``duplicate_key`` among the remaining rows
  (every copy is rejected; identical ``deployments`` rows are one row), then
  ``negative_count``, the table's own rules in the order listed in the schema,
  the ``unknown_*`` references and the ``ambiguous_*`` ones.
- ``unknown_*`` and ``ambiguous_*`` look the parent key up among *all* parent
  rows as read; ``round_out_of_order`` reads the end times of clean steps.

Each loading path is a way of evaluating that one definition (docs/sql.md,
"How the row rules are applied"):

- exact (DuckDB, ``ingest.load``): the rows are copied, the classification is
  materialised (``rejected_sql``) and the rejected rows deleted;
- in place (DuckDB, the rounds of a report): nothing is copied. The rules that
  read the row alone are counted in one pass over the files, with the
  classification's own conditions (``row_pass_sql``); each rule that reads other
  rows is counted from aggregates of the rounds that the views build anyway
  (``in_place_witness_sql``). Every count is zero exactly when no row breaks the
  rule, so zero everywhere means the classification finds nothing; any other
  count sends the rounds down the exact path;
- Spark: the classification transpiled (``analyzer.spark.load``).

Join keys: a partition column is part of its table's key, and a join between
two tables also matches every partition column they share. The clean tables
carry that join as one integer per link, ``request_uid`` (rounds ↔ requests)
and ``step_uid`` (rounds ↔ steps), so the views in ``sql/`` stay independent
of how a trace directory happens to be partitioned. The integer is the one the
writer stored (``TablePlan.written_links``: every file of both tables carries it;
combined with the shared partition values when there are), else a hash of the
string keys. The row rules never read it: they match the string keys, so no
uid, valid or not, changes a rejected row (``ingest.load.check_link_keys``
decides whether the written uids may stand for the keys).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .schema import TableSchema

DECLARED_TO_DUCKDB = {
    "VARCHAR": "varchar",
    "INTEGER": "integer",
    "BIGINT": "bigint",
    "DOUBLE": "double",
    "BOOLEAN": "boolean",
    "TIMESTAMP": "timestamp",
    "INTEGER[]": "integer[]",
    "BIGINT[]": "bigint[]",
}

# A time written as text: ISO-8601's extended format (a space may stand for the T),
# optionally with an offset (Z, ±hh, ±hhmm, ±hh:mm). DuckDB would also read 'epoch',
# 'infinity' and zone names, which are not times a trace should hold.
ISO_8601 = ("^[0-9]{4}-[0-9]{2}-[0-9]{2}"
            "([T ][0-9]{2}:[0-9]{2}(:[0-9]{2}([.][0-9]+)?)?(Z|[+-][0-9]{2}(:?[0-9]{2})?)?)?$")


@dataclass(frozen=True)
class TablePlan:
    table: str
    files: tuple[str, ...]
    partitions: tuple[str, ...]
    present_columns: frozenset[str]
    extra_columns: tuple[str, ...] = ()
    parent_present: dict[str, bool] = field(default_factory=dict)
    shared_partitions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    stop_reason_anywhere: bool = True
    # each parent's own key as read: its key columns and all of its partition columns
    parent_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # listed columns that some file stores as text (a time given as a string)
    text_columns: frozenset[str] = frozenset()
    # the link keys (request_uid, step_uid) read from the files instead of hashed: every
    # file of both tables of the link carries the column (ingest.load.written_links)
    written_links: frozenset[str] = frozenset()


# Columns the loader fills: the link keys (listed columns a writer may store, else the
# loader's hash) and the row id. An unlisted input column of such a name is kept as input_<name>.
DERIVED_COLUMNS = ("request_uid", "step_uid", "_specan_row")


def q(name: str) -> str:
    """Quote an identifier."""
    return '"' + name.replace('"', '""') + '"'


def lit(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def _file_list(files: tuple[str, ...]) -> str:
    return "[" + ", ".join(lit(f) for f in files) + "]"


# --------------------------------------------------------------------------- structure


def uncastable_value_sql(column: str, declared: str, file_column: str | None = None) -> str:
    """One value of ``column`` in the file given as parameter that does not fit ``declared``;
    with ``file_column`` (over many files), that value and the first file holding one."""
    target = DECLARED_TO_DUCKDB[declared]
    c = q(column)
    file, first = (f", {q(file_column)}", f" order by {q(file_column)}") if file_column else ("", "")
    if declared == "TIMESTAMP":
        # only a text column gets here (a timestamp or date always converts): it must be ISO-8601
        return (f"select cast({c} as varchar){file} from read_parquet(?) where {c} is not null and "
                f"(not regexp_matches(cast({c} as varchar), {lit(ISO_8601)}) "
                f"or try_cast(cast({c} as varchar) as timestamptz) is null){first} limit 1")
    lossy = ""
    # A count stored as 3.5 would be silently rounded by a cast.
    if declared in ("INTEGER", "BIGINT"):
        lossy = f" or try_cast({c} as double) <> try_cast({c} as {target})"
    elif declared in ("INTEGER[]", "BIGINT[]"):
        element = "integer" if declared == "INTEGER[]" else "bigint"
        lossy = (f" or len(list_filter({c}, lambda x: try_cast(x as double) <> try_cast(x as {element}))) > 0")
    return (f"select cast({c} as varchar){file} from read_parquet(?) "
            f"where {c} is not null and (try_cast({c} as {target}) is null{lossy}){first} limit 1")


# --------------------------------------------------------------------------- raw tables


def _cast(name: str, declared: str, as_text: bool) -> str:
    target = DECLARED_TO_DUCKDB[declared]
    if declared == "TIMESTAMP" and as_text:
        # text is ISO-8601 (checked with the structure): an offset is converted to UTC, none
        # means UTC (the session's time zone, on both engines)
        return f"cast(cast(cast({q(name)} as varchar) as timestamptz) as timestamp)"
    expr = f"cast({q(name)} as {target})"
    if declared == "DOUBLE":
        # NaN and ±inf are read as null (docs/trace-format.md).
        return f"case when isfinite({expr}) then {expr} end"
    return expr


def _column_exprs(schema: TableSchema, plan: TablePlan) -> dict[str, str]:
    exprs: dict[str, str] = {}
    for column in schema.columns:
        target = DECLARED_TO_DUCKDB[column.type]
        if column.name in plan.present_columns:
            expr = _cast(column.name, column.type, column.name in plan.text_columns)
        else:
            expr = f"cast(null as {target})"
        if column.default is not None:
            expr = f"coalesce({expr}, {lit(column.default)})"
        exprs[column.name] = expr
    for column in schema.columns:
        if column.default_column:
            exprs[column.name] = f"coalesce({exprs[column.name]}, {exprs[column.default_column]})"
    return exprs


def _uid(exprs: dict[str, str], columns: tuple[str, ...], partitions: tuple[str, ...]) -> str:
    parts = [exprs[c] for c in columns] + [f"cast({q(p)} as varchar)" for p in partitions]
    return f"hash({', '.join(parts)})"


def _written_uid(exprs: dict[str, str], uid: str, partitions: tuple[str, ...]) -> str:
    """The link key from the uid a writer stored: itself, or with the shared partition
    values mixed in, so a uid need only tell keys apart within one partition (a hive
    partition is one value per file: hashing an integer with it costs a tenth of
    hashing the string keys)."""
    if not partitions:
        return exprs[uid]
    mixed = ", ".join([exprs[uid]] + [f"cast({q(p)} as varchar)" for p in partitions])
    return f"case when {exprs[uid]} is not null then hash({mixed}) end"


# Each link key, the id column it stands for, and the parent table that defines it.
LINK_KEYS = {"request_uid": ("request_id", "requests"), "step_uid": ("step_id", "steps")}


def link_key_columns(schema: TableSchema, plan: TablePlan, uid: str) -> tuple[str, ...]:
    """The string key a link key stands for in this table: deployment_id, the id, and the
    partition columns the link spans."""
    column, parent = LINK_KEYS[uid]
    if schema.table == "rounds":
        if uid == "request_uid" and not plan.parent_present.get("requests"):
            # Without a requests table a request is identified by the rounds' own key.
            partitions = tuple(sorted(p for p in plan.partitions if p not in schema.key))
        else:
            partitions = plan.shared_partitions[parent]
    else:
        partitions = plan.shared_partitions["rounds"]
    return ("deployment_id", column) + partitions


def _link_columns(schema: TableSchema, plan: TablePlan, exprs: dict[str, str]) -> dict[str, str]:
    """request_uid / step_uid: the join keys between rounds and its parents."""
    links: dict[str, str] = {}
    for uid in schema.link_columns:
        columns = link_key_columns(schema, plan, uid)
        key, partitions = columns[:2], columns[2:]
        links[uid] = (_written_uid(exprs, uid, partitions) if uid in plan.written_links
                      else _uid(exprs, key, partitions))
    if schema.table == "rounds":
        links["step_uid"] = f"case when {exprs['step_id']} is not null then {links['step_uid']} end"
    return links


def rows_without_uid_conditions(schema: TableSchema, plan: TablePlan) -> dict[str, str]:
    """Per written link key of the table, the condition of a row that has the link's id
    but not the uid its writer should have stored with it (a null cannot link it)."""
    return {uid: f"{q(LINK_KEYS[uid][0])} is not null and {q(uid)} is null"
            for uid in schema.link_columns if uid in plan.written_links}


def rows_without_uid_column(uid: str) -> str:
    """The row pass's count of rows without ``uid`` (not a rule: such a row is not
    rejected, the written link key is not used)."""
    return f"_rows_without_{uid}"


def _partition_columns(schema: TableSchema, plan: TablePlan) -> tuple[str, ...]:
    return tuple(p for p in plan.partitions if p not in schema.column_names)


def raw_select_sql(schema: TableSchema, plan: TablePlan, source: str | None) -> str:
    """The select that types and defaults the table's rows read from ``source`` (a
    relation holding the files' columns, unioned by name; None: no files)."""
    exprs = _column_exprs(schema, plan)
    select = [f"{expr} as {q(name)}" for name, expr in exprs.items() if name not in schema.link_columns]
    select += [f"{q(c)} as {q('input_' + c)}" if c in DERIVED_COLUMNS else q(c) for c in plan.extra_columns]
    select += [q(p) for p in _partition_columns(schema, plan)]
    select += [f"{expr} as {name}" for name, expr in _link_columns(schema, plan, exprs).items()]
    columns = ",\n  ".join(select)
    if source is None:
        return f"select\n  {columns}\nwhere false"
    return f"select\n  {columns}\nfrom {source}"


def raw_table_sql(schema: TableSchema, plan: TablePlan, *, view: str | None = None) -> str:
    """One scan of the table's files into ``_raw_<table>``, typed and defaulted.

    With ``view``, the same select becomes a view of that name over the files
    instead: nothing is copied, and every query reads the Parquet directly.
    """
    target = f"view {q(view)}" if view else f"table _raw_{schema.table}"
    hive = "true" if plan.partitions else "false"
    source = (f"read_parquet({_file_list(plan.files)}, union_by_name = true, hive_partitioning = {hive})"
              if plan.files else None)
    return f"create or replace {target} as {raw_select_sql(schema, plan, source)}"


# --------------------------------------------------------------------------- the row rules


@dataclass(frozen=True)
class RuleInputs:
    """Where a table's classification reads what is not its own row.

    ``rows``: the table's rows as read, typed (``raw_select_sql``); ``parents``: each
    parent table as read, its rejected rows included; ``clean``: each parent's clean
    rows (the steps whose end times order a request's rounds)."""

    rows: str
    parents: Mapping[str, str] = field(default_factory=dict)
    clean: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RowRule:
    """One rule as the classification applies it: ``when condition then reason``.

    ``reads`` says what the condition needs besides the row (and so how the in-place
    strategy counts it): ``row`` (the row alone), ``duplicates`` (the table's other rows
    with its key), ``order`` (the request's earlier rounds and their steps),
    ``parent`` or ``ambiguous`` (the parent table ``parent`` as read)."""

    reason: str
    condition: str
    reads: str = "row"
    parent: str | None = None


# Columns a schema's rule may name besides the table's own; the classification adds
# them to the rows when a rule names them. Each is computed from other rows.
IMPLICIT_STOP = "_implicit_stop_round"   # rounds without any stop_reason column: the request's last round
STEP_END = "_step_end_us"                # the end of the round's clean step (µs since the epoch)
EARLIER_STEP_END = "_earlier_step_end_us"   # the latest such end among the request's lower round_idx


def _key_columns(schema: TableSchema, plan: TablePlan) -> tuple[str, ...]:
    if not schema.partitions_in_key:
        return schema.key
    return schema.key + _partition_columns(schema, plan)


def _row_key(schema: TableSchema, plan: TablePlan) -> str:
    parts = [f"'{c}=' || coalesce(cast(r.{q(c)} as varchar), 'NULL')" for c in _key_columns(schema, plan)]
    return f"concat_ws(', ', {', '.join(parts)})"


def _null_required(schema: TableSchema) -> str:
    return " or ".join(f"r.{q(c)} is null" for c in schema.required_columns)


def _reads(rule_sql: str) -> str:
    return "order" if EARLIER_STEP_END in rule_sql or STEP_END in rule_sql else "row"


def table_rules(schema: TableSchema, plan: TablePlan) -> list[RowRule]:
    """The table's row rules, in the order they are applied."""
    rules = [RowRule("null_required", _null_required(schema))]
    if schema.merge_identical_rows:
        rules.append(RowRule("duplicate_key", "variants._n > 1", "duplicates"))
    else:
        rules.append(RowRule("duplicate_key", "dup._dup", "duplicates"))
    if schema.negative_count and schema.count_columns:
        rules.append(RowRule("negative_count", " or ".join(f"r.{q(c)} < 0" for c in schema.count_columns)))
    rules += [RowRule(rule.reason, rule.when, _reads(rule.when)) for rule in schema.rules]
    ambiguous = []
    for i, ref in enumerate(schema.references):
        if not plan.parent_present.get(ref.table, False):
            continue  # "when requests is present": an absent parent table checks nothing
        unless = f"r.{q(ref.unless_null)} is not null and " if ref.unless_null else ""
        rules.append(RowRule(ref.reason, f"{unless}p{i}._found is null", "parent", ref.table))
        if ref.ambiguous_reason:
            ambiguous.append(RowRule(ref.ambiguous_reason, f"p{i}._parents > 1", "ambiguous", ref.table))
    return rules + ambiguous


def _rows_cte(schema: TableSchema, plan: TablePlan, rules: list[RowRule], inputs: RuleInputs,
              row_ids: bool) -> list[str]:
    """``r``: the rows with the columns the rules name besides their own (``_specan_row``,
    the table's rowid, with ``row_ids``). A request's rounds and a round's step are
    found by their string keys, not by the link keys: a written uid that links wrongly
    must not move a rejected row (the link keys are checked afterwards)."""
    row_id = ", rowid as _specan_row" if row_ids else ""
    named = " ".join(rule.condition for rule in rules)
    request = (", ".join(f"r0.{q(c)}" for c in link_key_columns(schema, plan, "request_uid"))
               if schema.table == "rounds" else "")
    stop = ""
    if IMPLICIT_STOP in named:
        stop = (", false as _implicit_stop_round" if plan.stop_reason_anywhere else
                f", round_idx = max(round_idx) over (partition by {request}) as _implicit_stop_round")
    if not any(rule.reads == "order" for rule in rules):
        return [f"r as (select *{row_id}{stop} from {inputs.rows} as r0)"]
    # A step's end as the views compute it (macro step_end_time), to the microsecond; a
    # step key that several clean steps share (ambiguous_step) has no one end. Rounds
    # without their required columns take no part in the order.
    keyed = " and ".join(f"r0.{q(c)} is not null" for c in schema.required_columns)
    steps = inputs.clean.get("steps")
    step_key = link_key_columns(schema, plan, "step_uid")
    if steps and plan.parent_present.get("steps"):
        ends = (f"select {', '.join(f'{q(c)} as _s{i}' for i, c in enumerate(step_key))}, "
                f"min(epoch_us(start_time) + cast(round(duration_ms * 1000) as bigint)) as _end "
                f"from {steps} group by {', '.join(q(c) for c in step_key)} having count(*) = 1")
    else:
        typed = [f"cast(null as {'bigint' if c == 'step_id' else 'varchar'}) as _s{i}" for i, c in enumerate(step_key)]
        ends = f"select {', '.join(typed)}, cast(null as bigint) as _end where false"
    # the same join as unknown_step's: a null step_id finds no step
    on = " and ".join(f"step_ends._s{i} = r0.{q(c)}" for i, c in enumerate(step_key))
    end = f"case when {keyed} then step_ends._end end"
    return [f"r0 as (select *{row_id}{stop} from {inputs.rows} as r0)",
            f"step_ends as ({ends})",
            f"r as (select r0.*, {end} as {STEP_END}, max({end}) over (partition by {request} "
            f"order by r0.round_idx range between unbounded preceding and 1 preceding) as {EARLIER_STEP_END} "
            f"from r0 left join step_ends on {on})"]


def _lookups(schema: TableSchema, plan: TablePlan, rules: list[RowRule],
             inputs: RuleInputs) -> tuple[list[str], list[str]]:
    """The CTEs and joins of the relations the rules read besides the row."""
    ctes, joins = [], []
    null_required = _null_required(schema)
    if schema.merge_identical_rows:
        # identical copies are one row; copies that differ are all duplicate_key, within one
        # partition (a date's row is that date's configuration: rows of other dates may differ)
        listed = ", ".join(q(c) for c in schema.column_names)
        keys = _key_columns(schema, plan)
        ctes.append("variants as (select " + ", ".join(f"{q(k)} as _k{i}" for i, k in enumerate(keys))
                    + f", count(distinct ({listed})) as _n from r where not ({null_required}) group by all)")
        joins.append("left join variants on " + " and ".join(
            f"r.{q(k)} {'=' if k in schema.required_columns else 'is not distinct from'} variants._k{i}"
            for i, k in enumerate(keys)))
    else:
        keys = _key_columns(schema, plan)
        # Group by one 64-bit hash of the key first (cheap even over string keys), then
        # compare the real keys only among rows whose hash repeats.
        key_hash = "hash(" + ", ".join(f"r.{q(k)}" for k in keys) + ")"
        ctes.append(f"dup_hash as (select {key_hash} as _h from r where not ({null_required}) "
                    f"group by 1 having count(*) > 1)")
        ctes.append(
            "dup as (select " + ", ".join(f"r.{q(k)} as _k{i}" for i, k in enumerate(keys))
            + f", true as _dup from r semi join dup_hash on {key_hash} = dup_hash._h "
            + f"where not ({null_required}) group by all having count(*) > 1)")
        # a key column that may be null (intervals.series, a partition) matches a null: two rows
        # whose keys are both null there are the same key, as the group by above counts them
        joins.append("left join dup on " + " and ".join(
            f"r.{q(k)} {'=' if k in schema.required_columns else 'is not distinct from'} dup._k{i}"
            for i, k in enumerate(keys)))
    read = {rule.parent for rule in rules if rule.reads == "parent"}
    for i, ref in enumerate(schema.references):
        if ref.table not in read:
            continue
        columns = ref.columns + plan.shared_partitions.get(ref.table, ())
        # how many parents, by their own full key, one join key finds: more than one is ambiguous
        own_key = plan.parent_keys.get(ref.table, columns)
        ctes.append(
            f"p{i} as (select " + ", ".join(f"{q(c)} as _p{j}" for j, c in enumerate(columns))
            + f", true as _found, count(distinct ({', '.join(q(c) for c in own_key)}, 0)) as _parents"
            + f" from {inputs.parents.get(ref.table, '_raw_' + ref.table)} group by all)")
        # a null key finds no parent: = is never true for it (a row with a null key is null_required)
        joins.append(f"left join p{i} on " + " and ".join(f"r.{q(c)} = p{i}._p{j}" for j, c in enumerate(columns)))
    return ctes, joins


def classification_sql(schema: TableSchema, plan: TablePlan, inputs: RuleInputs, *,
                       row_ids: bool = False) -> str:
    """The row rules' one definition: every row of ``inputs.rows`` with ``_row_key`` (its
    key as text) and ``_reason``, the first rule it breaks (null: the row is clean).
    With ``row_ids`` the rows carry ``_specan_row`` (DuckDB's rowid of ``inputs.rows``)."""
    rules = table_rules(schema, plan)
    ctes = _rows_cte(schema, plan, rules, inputs, row_ids)
    more, joins = _lookups(schema, plan, rules, inputs)
    cases = "\n    ".join(f"when {rule.condition} then {lit(rule.reason)}" for rule in rules)
    return (
        "with " + ",\n".join(ctes + more) + "\n"
        f"select r.*, {_row_key(schema, plan)} as _row_key,\n"
        f"  case\n    {cases}\n  end as _reason\n"
        "from r\n" + "\n".join(joins)
    )


def rejected_sql(schema: TableSchema, plan: TablePlan, inputs: RuleInputs) -> str:
    """The exact strategy: ``_rejected_<table>(table_name, row_key, reason, _specan_row)``,
    one row per row the classification rejects."""
    return (f"create or replace table _rejected_{schema.table} as\n"
            f"select {lit(schema.table)} as table_name, _row_key as row_key, _reason as reason, _specan_row\n"
            f"from (\n{classification_sql(schema, plan, inputs, row_ids=True)}\n) where _reason is not null")


# Rejected rows shown per (table, reason) by `validate`, and all a scale-out engine brings back.
EXAMPLES_PER_REASON = 3


def rejected_examples_sql(relation: str, per_reason: int = EXAMPLES_PER_REASON) -> str:
    """The first ``per_reason`` rejected rows of each (table, reason) by row key: what a
    scale-out engine brings back of its rejected rows (their counts come with the load)."""
    return (f"select table_name, row_key, reason from (\n"
            f"    select table_name, row_key, reason,\n"
            f"        row_number() over (partition by table_name, reason order by row_key) as n\n"
            f"    from {relation}\n) as ranked where n <= {int(per_reason)}")


def parents_as_read_sql(table: str) -> str:
    """A parent table as read, once it is clean: its clean rows and the copies of its rejected ones."""
    return f"(select * from {table} union all by name select * from _rejected_copy_{table})"


# A table whose identical rows are merged (deployments) keeps each partition's row as that
# partition's version, and as its clean table the latest partition's row of each key.
VERSIONS = {"deployments": ("deployment_versions", "deployment_conflicts")}


def partition_text_sql(columns: tuple[str, ...], alias: str = "") -> str:
    """A row's partition values as text, 'date=2026-11-28' (name=value in the order of the
    columns' names, joined by ', ', as ``request_partitions.partition``); null when there are none."""
    if not columns:
        return "cast(null as varchar)"
    prefix = f"{alias}." if alias else ""
    return "concat_ws(', ', " + ", ".join(
        f"'{c}=' || coalesce(cast({prefix}{q(c)} as varchar), 'NULL')" for c in sorted(columns)) + ")"


def versions_sql(schema: TableSchema, plan: TablePlan, classified: str) -> dict[str, str]:
    """The clean relations of a table whose identical rows are merged, as selects over
    ``classified`` (its rows with ``_reason``), in the order they are created; standard SQL
    that DuckDB and Spark both run:

    - ``deployment_versions``: one row per key and partition, that partition's row
      (``partition`` as text besides the partition columns themselves);
    - ``deployments``: one row per key, the latest partition's version;
    - ``deployment_conflicts``: one row per key and partition whose rows differ (duplicate_key),
      with the partition columns and ``partition``.
    """
    versions, conflicts = VERSIONS[schema.table]
    parts = _partition_columns(schema, plan)
    columns = [q(c) for c in schema.column_names]
    columns += [q("input_" + c if c in DERIVED_COLUMNS else c) for c in plan.extra_columns]
    kept = ", ".join(columns + [q(p) for p in parts])
    key = ", ".join(q(k) for k in schema.key)
    latest = ", ".join(f"{q(p)} desc" for p in parts) or "1"
    return {
        versions: f"select distinct {kept}, {partition_text_sql(parts)} as partition "
                  f"from {classified} as c where _reason is null",
        schema.table: f"select {', '.join(columns)} from (select *, row_number() over (partition by {key} "
                      f"order by {latest}) as _version from {versions}) as v where _version = 1",
        conflicts: f"select distinct {', '.join([key] + [q(p) for p in parts])}, {partition_text_sql(parts)} "
                   f"as partition from {classified} as c where _reason = 'duplicate_key'",
    }


def conflict_rows_sql(plans: dict[str, TablePlan], dependents: tuple[str, ...], *, any_conflict: bool) -> str:
    """``deployment_conflicts`` with, per conflict, how many rows of each dependent table
    need that deployment there: its rows in that partition when the table has the
    deployments' partition columns, else all its rows. Without ``any_conflict`` the
    counts are zero and no table is read. Standard SQL, for DuckDB and Spark."""
    _versions, conflicts = VERSIONS["deployments"]
    if not any_conflict:
        return ("select *, " + ", ".join(f"cast(0 as bigint) as {q(t)}" for t in dependents)
                + f" from {conflicts}")
    selects, joins = [], []
    for i, table in enumerate(dependents):
        keys = ["deployment_id"] + [p for p in plans["deployments"].partitions if p in plans[table].partitions]
        listed = ", ".join(q(k) for k in keys)
        joins.append(f"left join (select {listed}, count(*) as _n from {table} group by {listed}) as n{i} on "
                     + " and ".join(f"c.{q(k)} = n{i}.{q(k)}" for k in keys))
        selects.append(f"coalesce(n{i}._n, 0) as {q(table)}")
    return f"select c.*, {', '.join(selects)} from {conflicts} as c " + " ".join(joins)


def clean_table_sql(schema: TableSchema, plan: TablePlan) -> list[str]:
    """Statements that turn ``_raw_<table>`` into the clean table: every row no rule rejected.

    Rejected rows are deleted in place and the table renamed, so the data is
    materialised once, not copied.
    """
    t = schema.table
    keep = (f"create or replace table _rejected_copy_{t} as select * from _raw_{t} "
            f"where rowid in (select _specan_row from _rejected_{t})")
    if schema.merge_identical_rows:
        classified = (f"(select r.*, j.reason as _reason from (select *, rowid as _specan_row from _raw_{t}) r "
                      f"left join _rejected_{t} j on r._specan_row = j._specan_row)")
        versions = versions_sql(schema, plan, classified)
        return [keep] + [f"create or replace table {name} as {sql}" for name, sql in versions.items()] + [
            f"drop table _raw_{t}"]
    return [keep, f"delete from _raw_{t} where rowid in (select _specan_row from _rejected_{t})",
            f"drop table if exists {t}",
            f"alter table _raw_{t} rename to {t}"]


# --------------------------------------------------------------------------- in place


def row_pass_sql(schema: TableSchema, plan: TablePlan, relation: str, group_by: str | None = None) -> str:
    """The in-place strategy's one pass over ``relation``: ``count(*)``, then per rule that
    reads the row alone (``reason``), how many rows break it, by the classification's
    own condition. A row that breaks two rules counts under both: each count is zero
    exactly when no row breaks that rule. With written link keys, also how many rows
    lack the uid their id needs (``rows_without_uid_column``)."""
    rules = [rule for rule in table_rules(schema, plan) if rule.reads == "row"]
    (cte,) = _rows_cte(schema, plan, rules, RuleInputs(relation), row_ids=False)
    counts = ", ".join(f"count(*) filter (where {rule.condition}) as {q(rule.reason)}" for rule in rules)
    for uid, condition in rows_without_uid_conditions(schema, plan).items():
        counts += f", count(*) filter (where {condition}) as {rows_without_uid_column(uid)}"
    if group_by:
        # one row per value of the column ``group_by`` of ``relation`` (the cache's trace units), first
        return f"with {cte}\nselect {group_by}, count(*) as rows, {counts} from r group by {group_by}"
    return f"with {cte}\nselect count(*) as rows, {counts} from r"


@dataclass(frozen=True)
class RoundAggregates:
    """What the in-place strategy reads instead of the rounds for the rules that read
    other rows: two relations that one pass over the rounds as read builds (the caller's;
    the report's views ``request_rounds`` and ``step_rounds``).

    ``per_request``: one row per (deployment_id, request_uid) with ``has_duplicate_round``
    (false only when no round_idx repeats), ``has_round_out_of_order`` (false only when the
    ends of the request's clean steps do not fall with round_idx) and
    ``request_uid_collides``; ``per_step``: one row per non-null ``step_uid`` with
    ``step_uid_collides``. Each also names its key (``request_id``, ``step_id``: the
    least of those behind the uid), which the check of written link keys compares
    with the parent's (``ingest.load.check_link_keys``)."""

    per_request: str
    per_step: str


# The column each parent of the rounds is joined on in the aggregates and in the parent
# as read (the link key; request_uid and step_uid hash the join columns), with the aggregate
# that holds it.
LINK_OF_PARENT = {"deployments": ("deployment_id", "per_request"),
                  "requests": ("request_uid", "per_request"),
                  "steps": ("step_uid", "per_step")}


def several_values_sql(columns) -> str:
    """True for a group whose rows hold more than one distinct tuple of ``columns`` (a null
    counting as a value, as ``count(distinct (a, b, 0)) > 1`` counts them): some column
    holds two values, or both a null and a value. Least and greatest per column, not a
    distinct count of the tuples: no set of tuples per group, over millions of parents."""
    return " or ".join(f"min({c}) <> max({c}) or count({c}) not in (0, count(*))" for c in columns)


def in_place_witness_sql(schema: TableSchema, plan: TablePlan, rule: RowRule, aggregates: RoundAggregates,
                         parents: Mapping[str, str]) -> str:
    """How many requests, steps or parent keys of the rounds could break ``rule`` (one that
    reads other rows), read off ``aggregates``: zero exactly when no round breaks it.
    Null-safe: a parent whose key is null finds nothing, as in the classification."""
    if rule.reads == "duplicates":
        return f"select count(*) from {aggregates.per_request} where has_duplicate_round is not false"
    if rule.reads == "order":
        return f"select count(*) from {aggregates.per_request} where has_round_out_of_order is not false"
    link, holder = LINK_OF_PARENT[rule.parent]
    keys = f"(select distinct {link} as _k from {getattr(aggregates, holder)} where {link} is not null) as r"
    parent = parents[rule.parent]
    if rule.reads == "parent":
        return f"select count(*) from {keys} where not exists (select 1 from {parent} as p where p.{link} = r._k)"
    shared = (f"(select {link} from {parent} as p group by {link} "
              f"having {several_values_sql(q(c) for c in plan.parent_keys[rule.parent])}) as p")
    return f"select count(*) from {keys} where exists (select 1 from {shared} where p.{link} = r._k)"
