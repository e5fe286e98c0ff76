"""The partition values that tell requests apart, for every listing that names a request.

Request ids may restart in each partition (``requests/date=2026-11-28/``): "req-00098"
is then one request per date, and only (deployment_id, request_id) plus the partition
values name one. The partition columns are whatever the trace directory's folders
say, known only once it is loaded, so they cannot be spelled in ``sql/``: this module
creates, before the views, the relation

- ``request_partitions (request_uid, partition)``: each requests row's partition
  values as text, ``name=value`` pairs in the order of the columns' names joined by
  ``", "`` (``date=2026-11-28``, as ``rejected_rows.row_key`` ends); a null value is
  ``NULL``. Empty when the requests table has no partition column.

The views that list requests (``request_anomalies``, ``output_tokens_mismatch``)
join it on request_uid; a request without a requests row has no partition there.
"""

from __future__ import annotations

import duckdb

from ..ingest.rules import lit, q


def partition_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    """A trace table's partition columns, by name (from ``trace_columns``)."""
    try:
        rows = con.execute("select column_name from trace_columns where table_name = ? and partition "
                           "order by column_name", [table]).fetchall()
    except duckdb.CatalogException:     # a workspace without load metadata has no partitions to name
        return []
    return [name for (name,) in rows]


def request_partition_columns(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The requests table's partition columns, by name."""
    return partition_columns(con, "requests")


def partition_label_sql(columns: list[str]) -> str:
    """The SQL text of the ``partition`` label of a row with ``columns``."""
    pairs = ", ".join(f"{lit(c + '=')} || coalesce(cast({q(c)} as varchar), 'NULL')" for c in columns)
    return f"concat_ws(', ', {pairs})"


def request_partitions_sql(columns: list[str]) -> str:
    """The query of ``request_partitions`` over the requests table with partition
    ``columns`` (DuckDB SQL; the Spark engine transpiles the same text). Without
    columns it is empty, typed like the requests table's request_uid."""
    label = partition_label_sql(columns) if columns else "cast(null as varchar)"
    return f"select request_uid, {label} as partition from requests" + ("" if columns else " where false")


def create_request_partitions(con: duckdb.DuckDBPyConnection, *, temporary: bool = False) -> list[str]:
    """Create ``request_partitions``; returns the partition columns it names. Without a
    requests table (the local finish of reduced traces: the views that list requests ran
    on the cluster) it is empty."""
    columns = request_partition_columns(con)
    create = "create or replace temp view" if temporary else "create or replace view"
    # tables and views alike
    if con.execute("select count(*) from information_schema.tables where table_name = 'requests'").fetchone()[0]:
        con.execute(f"{create} request_partitions as {request_partitions_sql(columns)}")
    else:
        con.execute(f"{create} request_partitions as select cast(null as ubigint) as request_uid, "
                    "cast(null as varchar) as partition where false")
    return columns
