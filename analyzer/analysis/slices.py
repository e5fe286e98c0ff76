"""Slices of the report by any requests column (``report --by COLUMN``, docs/metrics.md).

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
from ..ingest.rules import q

SLICE_KEYS = ("deployment_id", "value", "num_requests", "mean_accept_length", "acceptance_rate",
              "tokens_per_round", "speedup", "repeat_ratio", "repeat_accept_correlation")


class UnknownSliceColumn(InputProblem):
    """A --by column that the requests table does not have (exit 2)."""


def requests_columns(con: duckdb.DuckDBPyConnection) -> list[str]:
    try:
        return [d[0] for d in con.execute("select * from requests limit 0").description]
    except duckdb.CatalogException:
        return []


def resolve_columns(con: duckdb.DuckDBPyConnection, by: Sequence[str]) -> tuple[str, ...]:
    """The requests columns named by ``by``, spelled as the table spells them, each once.

    DuckDB matches identifiers regardless of case, so ``--by Tenant`` finds ``tenant``."""
    existing = requests_columns(con)
    spelled = {c.lower(): c for c in existing}
    columns: list[str] = []
    for name in by:
        column = spelled.get(name.lower())
        if column is None:
            listed = ", ".join(existing) if existing else "none (there is no requests table)"
            raise UnknownSliceColumn(f"unknown --by column {name!r}: the requests columns are {listed}")
        if column not in columns:
            columns.append(column)
    return tuple(columns)


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
        values = "\nunion all\n".join(
            f"select deployment_id, request_uid, {_literal(c)} as slice_column, "
            f"cast({q(c)} as varchar) as slice_value from requests" for c in columns)
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
