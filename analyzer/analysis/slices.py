"""Slices of the report by a requests column that labels the traffic, or by a deployments
column whose value changed between partitions (``report --by COLUMN``, docs/metrics.md;
``NOT_SLICED`` says which columns are not offered).

A request's value in a deployments column is that of its partition's configuration:
``deployment_versions`` matched on deployment_id and the partition columns the two
tables share (``--by engine_version`` splits a deployment at its upgrade).

The user names the columns, so they cannot be a view in ``sql/``: this module turns
them into two relations that the slice views (``slice_requests`` → ``slice_metrics``)
read, created before those views:

- ``slice_columns (slice_column, position)``: the columns, in the order given;
- ``request_slices (deployment_id, request_uid, slice_column, slice_value)``: each
  request's value in each column, as text (null stays null).

Without ``--by`` both are empty, so every view exists and ``slice_metrics`` is empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb

from ..errors import InputProblem
from ..ingest.rules import DERIVED_COLUMNS, q
from .partitions import partition_columns

SLICE_KEYS = ("deployment_id", "value", "num_requests", "mean_accept_length", "acceptance_rate",
              "tokens_per_round", "speedup", "repeat_ratio", "repeat_accept_correlation")


class UnknownSliceColumn(InputProblem):
    """A --by column that the requests table does not have, or one nobody slices by (exit 2)."""


# The requests columns a slice by would say nothing about the traffic: each request has
# a value of its own (its identity, its times, its token ids), the value is a measurement of the
# request rather than a label of it, or the deployment, which every slice is within.
NOT_SLICED = {
    "deployment_id": "every slice is within a deployment already",
    "request_id": "the request's key: one slice per request",
    "arrival_time": "a time: one slice per request",
    "first_token_time": "a time: one slice per request",
    "finish_time": "a time: one slice per request",
    "prompt_tokens": "a count measured per request (the context curve groups by context length)",
    "output_tokens": "a count measured per request",
    "num_preemptions": "a count measured per request",
    "quality_score": "a score measured per request",
    "prompt_token_ids": "token ids",
    "output_token_ids": "token ids",
    **{c: "a link key specan adds: one slice per request" for c in DERIVED_COLUMNS},
}


def requests_columns(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """The clean requests table's columns and their DuckDB types, in table order."""
    try:
        return [(name, typ) for name, typ, *_ in con.execute("describe requests").fetchall()]
    except duckdb.CatalogException:
        return []


def deployments_columns(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """The deployments columns a request can be sliced by: all but its key."""
    try:
        return [(name, typ) for name, typ, *_ in con.execute("describe deployments").fetchall()
                if name != "deployment_id"]
    except duckdb.CatalogException:
        return []


def why_not_sliced(column: str, duckdb_type: str) -> str | None:
    """Why a slice by this requests column would say nothing, or None when it is a label.
    An extra column is judged by its type: a list or a nested value holds many values,
    a timestamp is one per request."""
    if column in NOT_SLICED:
        return NOT_SLICED[column]
    if "[" in duckdb_type or duckdb_type.startswith(("STRUCT", "MAP", "UNION")):
        return "it holds lists or nested values"
    if duckdb_type.startswith("TIMESTAMP"):
        return "a time: one slice per request"
    return None


def resolve_columns(con: duckdb.DuckDBPyConnection, by: Sequence[str]) -> tuple[str, ...]:
    """The requests columns named by ``by``, spelled as the table spells them, each once.

    DuckDB matches identifiers regardless of case, so ``--by Tenant`` finds ``tenant``.
    A column the table lacks, or one of ``NOT_SLICED`` (by name or type), is an
    UnknownSliceColumn naming the columns it can slice by."""
    existing = requests_columns(con)
    spelled = {c.lower(): (c, typ) for c, typ in existing}
    for c, typ in deployments_columns(con):
        spelled.setdefault(c.lower(), (c, typ))
    sliceable = [c for c, typ in existing if why_not_sliced(c, typ) is None]
    listed = ", ".join(sliceable) if existing else "none (there is no requests table)"
    if existing:
        listed += ("; the deployments columns (a request takes its partition's configuration) are "
                   + ", ".join(c for c, _ in deployments_columns(con)))
    columns: list[str] = []
    for name in by:
        found = spelled.get(name.lower()) if existing else None
        if found is None:
            raise UnknownSliceColumn(f"unknown --by column {name!r}: the requests columns to slice by are {listed}")
        column, typ = found
        why = why_not_sliced(column, typ)
        if why is not None:
            raise UnknownSliceColumn(f"--by {column}: not a column to slice by ({why}); "
                                     f"the requests columns to slice by are {listed}")
        if column not in columns:
            columns.append(column)
    return tuple(columns)


def _request_values_sql(con: duckdb.DuckDBPyConnection, column: str) -> str:
    """Each request's value in ``column``: its own, or its partition's deployment configuration's."""
    if column in {c for c, _ in requests_columns(con)}:
        return (f"select deployment_id, request_uid, {_literal(column)} as slice_column, "
                f"cast({q(column)} as varchar) as slice_value from requests")
    try:
        held = {name for name, *_ in con.execute("describe deployment_versions").fetchall()}
    except duckdb.CatalogException:
        held = set()
    versioned = set(partition_columns(con, "deployments")) & held
    shared = sorted(versioned & set(partition_columns(con, "requests")))
    if versioned - set(shared):
        # one request could match several dates' configurations: its own is unknown
        raise UnknownSliceColumn(
            f"--by {column}: deployments are partitioned by {', '.join(sorted(versioned))} but requests are not "
            f"by {', '.join(sorted(versioned - set(shared)))}, so which configuration served a request is unknown")
    source = "deployment_versions" if versioned else "deployments"
    on = " and ".join(["v.deployment_id = r.deployment_id"] + [f"v.{q(p)} = r.{q(p)}" for p in shared])
    return (f"select r.deployment_id, r.request_uid, {_literal(column)} as slice_column, "
            f"cast(v.{q(column)} as varchar) as slice_value from requests as r left join {source} as v on {on}")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def create_slice_relations(con: duckdb.DuckDBPyConnection, by: Sequence[str] = (), *,
                           temporary: bool = False) -> tuple[str, ...]:
    """Create ``slice_columns`` and ``request_slices`` for the columns ``by`` (checked
    against the requests table first); returns the columns as the table spells them."""
    columns = resolve_columns(con, by) if by else ()
    create = "create or replace temp view" if temporary else "create or replace view"
    if columns:
        listed = ", ".join(f"({_literal(c)}, {i})" for i, c in enumerate(columns, 1))
        con.execute(f"{create} slice_columns as select * from (values {listed}) as t(slice_column, position)")
        values = "\nunion all\n".join(_request_values_sql(con, c) for c in columns)
        con.execute(f"{create} request_slices as\n{values}")
    else:
        # typed and empty, without reading requests: a workspace may have none
        con.execute(f"{create} slice_columns as select cast(null as varchar) as slice_column, "
                    "cast(null as integer) as position where false")
        con.execute(f"{create} request_slices as select cast(null as varchar) as deployment_id, "
                    "cast(null as ubigint) as request_uid, cast(null as varchar) as slice_column, "
                    "cast(null as varchar) as slice_value where false")
    return columns


def slices_document(con: duckdb.DuckDBPyConnection, columns: Sequence[str]) -> list[dict[str, Any]]:
    """The report's ``slices``: per column, in the order given, its rows ordered by
    deployment_id, then value as text with the null slice last."""
    if not columns:
        return []
    result = con.execute("""
        select slice_column, deployment_id, slice_value as value, num_requests, mean_accept_length,
               acceptance_rate, tokens_per_round, speedup, repeat_ratio, repeat_accept_correlation
        from slice_metrics
        order by slice_column, deployment_id, slice_value nulls last""")
    names = [d[0] for d in result.description]
    by_column: dict[str, list[dict[str, Any]]] = {c: [] for c in columns}
    for values in result.fetchall():
        row = dict(zip(names, values))
        by_column[row.pop("slice_column")].append({k: row[k] for k in SLICE_KEYS})
    return [{"column": c, "rows": rows} for c, rows in by_column.items()]
