"""SQL for the raw → clean step: casts, defaults and the row rules.

Every statement here is generated from a table's schema (``schemas/*.json``)
and a ``TablePlan`` describing the files actually found, because the columns
present and the Hive partition columns are only known at load time.

Row rules, per docs/trace-format.md:

- ``null_required`` first, then ``duplicate_key`` among the remaining rows
  (every copy is rejected), then ``negative_count``, the table's own rules and
  the ``unknown_*`` references, in the order listed in the schema.
- A rejected row is recorded once, under the first rule it breaks.
- ``unknown_*`` looks the parent key up among *all* parent rows as read.

Join keys: a partition column is part of its table's key, and a join between
two tables also matches every partition column they share. The clean tables
carry that join as one integer per link, ``request_uid`` (rounds ↔ requests)
and ``step_uid`` (rounds ↔ steps), so the views in ``sql/`` stay independent
of how a trace directory happens to be partitioned.
"""

from __future__ import annotations

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


# Columns the loader adds. An input column of the same name is kept as input_<name>.
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


def uncastable_value_sql(column: str, declared: str) -> str:
    """One value of ``column`` in the file given as parameter that does not fit ``declared``."""
    target = DECLARED_TO_DUCKDB[declared]
    c = q(column)
    lossy = ""
    # A count stored as 3.5 would be silently rounded by a cast.
    if declared in ("INTEGER", "BIGINT"):
        lossy = f" or try_cast({c} as double) <> try_cast({c} as {target})"
    elif declared in ("INTEGER[]", "BIGINT[]"):
        element = "integer" if declared == "INTEGER[]" else "bigint"
        lossy = (f" or len(list_filter({c}, lambda x: try_cast(x as double) <> try_cast(x as {element}))) > 0")
    return (f"select cast({c} as varchar) from read_parquet(?) "
            f"where {c} is not null and (try_cast({c} as {target}) is null{lossy}) limit 1")


# --------------------------------------------------------------------------- raw tables


def _cast(name: str, declared: str) -> str:
    target = DECLARED_TO_DUCKDB[declared]
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
            expr = _cast(column.name, column.type)
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


def _link_columns(schema: TableSchema, plan: TablePlan, exprs: dict[str, str]) -> dict[str, str]:
    """request_uid / step_uid: the join keys between rounds and its parents."""
    links: dict[str, str] = {}
    if schema.table == "requests":
        links["request_uid"] = _uid(exprs, ("deployment_id", "request_id"), plan.shared_partitions["rounds"])
    elif schema.table == "steps":
        links["step_uid"] = _uid(exprs, ("deployment_id", "step_id"), plan.shared_partitions["rounds"])
    elif schema.table == "rounds":
        # Without a requests table a request is identified by the rounds' own key.
        request_parts = (plan.shared_partitions["requests"] if plan.parent_present.get("requests")
                         else tuple(sorted(p for p in plan.partitions if p not in schema.key)))
        links["request_uid"] = _uid(exprs, ("deployment_id", "request_id"), request_parts)
        step = _uid(exprs, ("deployment_id", "step_id"), plan.shared_partitions["steps"])
        links["step_uid"] = f"case when {exprs['step_id']} is not null then {step} end"
    return links


def _partition_columns(schema: TableSchema, plan: TablePlan) -> tuple[str, ...]:
    return tuple(p for p in plan.partitions if p not in schema.column_names)


def raw_select_sql(schema: TableSchema, plan: TablePlan, source: str | None) -> str:
    """The select that types and defaults the table's rows read from ``source`` (a
    relation holding the files' columns, unioned by name; None: no files)."""
    exprs = _column_exprs(schema, plan)
    select = [f"{expr} as {q(name)}" for name, expr in exprs.items()]
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


# --------------------------------------------------------------------------- row rules


def _key_columns(schema: TableSchema, plan: TablePlan) -> tuple[str, ...]:
    if not schema.partitions_in_key:
        return schema.key
    return schema.key + _partition_columns(schema, plan)


def _row_key(schema: TableSchema, plan: TablePlan) -> str:
    parts = [f"'{c}=' || coalesce(cast(r.{q(c)} as varchar), 'NULL')" for c in _key_columns(schema, plan)]
    return f"concat_ws(', ', {', '.join(parts)})"


def _null_required(schema: TableSchema) -> str:
    return " or ".join(f"r.{q(c)} is null" for c in schema.required_columns)


def parents_as_read_sql(table: str) -> str:
    """A parent table as read, once it is clean: its clean rows and the copies of its rejected ones."""
    return f"(select * from {table} union all by name select * from _rejected_copy_{table})"


def rejected_sql(schema: TableSchema, plan: TablePlan, parents: dict[str, str] | None = None) -> str:
    """``_rejected_<table>(table_name, row_key, reason, _specan_row)``: one row per rejected row.

    ``parents`` maps a parent table to the relation that holds it as read
    (default ``_raw_<parent>``, while it is not yet clean).
    """
    ctes, joins, cases = _rule_parts(schema, plan, parents or {}, row_ids=True)
    return (
        f"create or replace table _rejected_{schema.table} as\nwith " + ",\n".join(ctes) + "\n"
        f"select * from (\n  select {lit(schema.table)} as table_name, {_row_key(schema, plan)} as row_key,\n"
        "    case\n      " + "\n      ".join(cases) + "\n    end as reason,\n    r._specan_row\n"
        "  from r\n  " + "\n  ".join(joins) + "\n) where reason is not null"
    )


def classified_sql(schema: TableSchema, plan: TablePlan) -> str:
    """Every row of ``_raw_<table>`` with ``_row_key`` and ``_reason`` (null: clean), by
    the same rules as ``rejected_sql``. For engines without row ids (Spark): the
    clean rows and the rejected ones are two filters of this one relation."""
    ctes, joins, cases = _rule_parts(schema, plan, {}, row_ids=False)
    return (
        "with " + ",\n".join(ctes) + "\n"
        f"select r.*, {_row_key(schema, plan)} as _row_key,\n"
        "  case\n    " + "\n    ".join(cases) + "\n  end as _reason\n"
        "from r\n" + "\n".join(joins)
    )


def _rule_parts(schema: TableSchema, plan: TablePlan, parents: dict[str, str],
                row_ids: bool) -> tuple[list[str], list[str], list[str]]:
    """The CTEs, joins and ``when ... then reason`` cases of the table's row rules."""
    if schema.merge_identical_rows:
        return _merged_rule_parts(schema, row_ids)
    keys = _key_columns(schema, plan)
    null_required = _null_required(schema)
    row_id = ", rowid as _specan_row" if row_ids else ""
    ctes = [f"r as (select *{row_id} from _raw_{schema.table})"]
    if any("_implicit_stop_round" in rule.when for rule in schema.rules):
        ctes[0] = _implicit_stop_cte(schema, plan, row_ids=row_ids)
    # Duplicates: group by one 64-bit hash of the key first (cheap even over string keys),
    # then compare the real keys only among rows whose hash repeats.
    key_hash = "hash(" + ", ".join(f"r.{q(k)}" for k in keys) + ")"
    ctes.append(f"dup_hash as (select {key_hash} as _h from r where not ({null_required}) "
                f"group by 1 having count(*) > 1)")
    ctes.append(
        "dup as (select " + ", ".join(f"r.{q(k)} as _k{i}" for i, k in enumerate(keys))
        + f", true as _dup from r semi join dup_hash on {key_hash} = dup_hash._h "
        + f"where not ({null_required}) group by all having count(*) > 1)")
    joins = ["left join dup on " + " and ".join(f"r.{q(k)} = dup._k{i}" for i, k in enumerate(keys))]
    cases = [f"when {null_required} then 'null_required'", "when dup._dup then 'duplicate_key'"]
    if schema.negative_count and schema.count_columns:
        cases.append("when " + " or ".join(f"r.{q(c)} < 0" for c in schema.count_columns)
                     + " then 'negative_count'")
    for rule in schema.rules:
        cases.append(f"when {rule.when} then {lit(rule.reason)}")
    ambiguous = []
    for i, ref in enumerate(schema.references):
        if not plan.parent_present.get(ref.table, False):
            continue  # "when requests is present": an absent parent table checks nothing
        columns = ref.columns + plan.shared_partitions.get(ref.table, ())
        # how many parents, by their own full key, one join key finds: more than one is ambiguous
        own_key = plan.parent_keys.get(ref.table, columns)
        ctes.append(
            f"p{i} as (select " + ", ".join(f"{q(c)} as _p{j}" for j, c in enumerate(columns))
            + f", true as _found, count(distinct ({', '.join(q(c) for c in own_key)}, 0)) as _parents"
            + f" from {parents.get(ref.table, '_raw_' + ref.table)} group by all)")
        joins.append(f"left join p{i} on " + " and ".join(f"r.{q(c)} = p{i}._p{j}" for j, c in enumerate(columns)))
        unless = f"r.{q(ref.unless_null)} is not null and " if ref.unless_null else ""
        cases.append(f"when {unless}p{i}._found is null then {lit(ref.reason)}")
        if ref.ambiguous_reason:
            ambiguous.append(f"when p{i}._parents > 1 then {lit(ref.ambiguous_reason)}")
    cases += ambiguous
    return ctes, joins, cases


def row_rule_count_sql(schema: TableSchema, plan: TablePlan, relation: str) -> str:
    """``(rows, rows_breaking_a_row_rule)`` of ``relation``: one aggregate pass.

    Only the rules that look at a row alone (null_required, negative_count and the
    table's own); duplicate keys and unknown parents are counted from the
    per-request and per-step aggregates instead (``load.unconfirmed_rounds``).
    The second number is an upper bound (a row breaking two rules counts twice):
    it only has to be zero exactly when no row breaks any. Nulls and negatives are
    read from plain column aggregates, far cheaper than a condition per row.
    """
    checks = [f"count(*) - count(r.{q(c)})" for c in schema.required_columns]
    if schema.negative_count and schema.count_columns:
        checks += [f"count(*) filter (where r.{q(c)} < 0)" for c in schema.count_columns]
    if schema.rules:
        checks.append("count(*) filter (where " + " or ".join(f"({rule.when})" for rule in schema.rules) + ")")
    cte = _implicit_stop_cte(schema, plan, relation, row_ids=False)
    return f"with {cte}\nselect count(*), " + " + ".join(checks) + " from r"


def _implicit_stop_cte(schema: TableSchema, plan: TablePlan, relation: str | None = None,
                       row_ids: bool = True) -> str:
    """Without any stop_reason column, a request's last round is its stopping round.

    ``relation`` defaults to ``_raw_<table>``; ``row_ids`` adds ``_specan_row`` (a table's rowid).
    """
    relation = relation or f"_raw_{schema.table}"
    row_id = ", rowid as _specan_row" if row_ids else ""
    if plan.stop_reason_anywhere:
        return f"r as (select *{row_id}, false as _implicit_stop_round from {relation})"
    return (f"r as (select *{row_id}, round_idx = max(round_idx) over (partition by request_uid) "
            f"as _implicit_stop_round from {relation})")


def _merged_rule_parts(schema: TableSchema, row_ids: bool) -> tuple[list[str], list[str], list[str]]:
    """deployments: identical copies are one row; copies that differ are all duplicate_key."""
    null_required = _null_required(schema)
    listed = ", ".join(q(c) for c in schema.column_names)
    (key,) = schema.key
    row_id = ", rowid as _specan_row" if row_ids else ""
    ctes = [f"r as (select *{row_id} from _raw_{schema.table})",
            f"variants as (select {q(key)} as _k, count(distinct ({listed})) as _n "
            f"from r where not ({null_required}) group by all)"]
    joins = [f"left join variants on r.{q(key)} = variants._k"]
    cases = [f"when {null_required} then 'null_required'", "when variants._n > 1 then 'duplicate_key'"]
    return ctes, joins, cases


def clean_table_sql(schema: TableSchema, plan: TablePlan) -> list[str]:
    """Statements that turn ``_raw_<table>`` into the clean table: every row no rule rejected.

    Rejected rows are deleted in place and the table renamed, so the data is
    materialised once, not copied.
    """
    t = schema.table
    keep = (f"create or replace table _rejected_copy_{t} as select * from _raw_{t} "
            f"where rowid in (select _specan_row from _rejected_{t})")
    if schema.merge_identical_rows:
        (key,) = schema.key
        drop = ", ".join(["_specan_row"] + [q(p) for p in _partition_columns(schema, plan)])
        return [keep, f"create or replace table {t} as select * exclude ({drop}) "
                f"from (select *, rowid as _specan_row from _raw_{t}) r "
                f"anti join _rejected_{t} j on r._specan_row = j._specan_row "
                f"qualify row_number() over (partition by r.{q(key)} order by r._specan_row) = 1",
                f"drop table _raw_{t}"]
    return [keep, f"delete from _raw_{t} where rowid in (select _specan_row from _rejected_{t})",
            f"drop table if exists {t}",
            f"alter table _raw_{t} rename to {t}"]
