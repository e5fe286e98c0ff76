"""A deployment across the partitions of its trace: what changed, and what is ambiguous.

The loader keeps each partition's ``deployments`` row as that partition's configuration
(``deployment_versions``: one row per deployment_id and partition) and, as ``deployments``,
the latest one; rows that share a deployment_id within one partition and differ are
``duplicate_key`` (``deployment_conflicts``: one row per deployment_id and partition).
This module reads both for the report (docs/trace-format.md, "Deployments across
partitions"):

- ``changes``: per deployment, each column whose value differs from the previous
  partition's, with the partition where the new value starts;
- ``conflicts``: per deployment and partition whose rows differ, the rows that need
  that deployment there (requests, steps, rounds), and whether any version of it is
  left to analyse. Its verdict is ``unknown``.
"""

from __future__ import annotations

from typing import Any

import duckdb

from ..ingest.load import DEPENDENT_TABLES
from ..ingest.rules import VERSIONS, q
from .partitions import partition_columns

VERSIONS_TABLE, CONFLICTS_TABLE = VERSIONS["deployments"]


def _exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return con.execute("select count(*) from duckdb_tables() where table_name = $1 union all "
                       "select count(*) from duckdb_views() where view_name = $1", [name]).fetchall() != [(0,), (0,)]


def changes(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """``[{deployment_id, column, before, after, partition}]``: a column's value in one
    partition against the previous partition's (partition values in order), as text."""
    if not _exists(con, VERSIONS_TABLE):
        return []
    held = {name for name, *_ in con.execute(f"describe {VERSIONS_TABLE}").fetchall()}
    parts = [p for p in partition_columns(con, "deployments") if p in held]
    if not parts:
        return []
    result = con.execute(f"select * from {VERSIONS_TABLE} order by deployment_id, "
                         + ", ".join(q(p) for p in parts))
    names = [d[0] for d in result.description]
    compared = [n for n in names if n not in parts and n not in ("deployment_id", "partition")]
    out, previous = [], None
    for values in result.fetchall():
        row = dict(zip(names, values))
        if previous is not None and previous["deployment_id"] == row["deployment_id"]:
            for column in compared:
                if previous[column] != row[column]:
                    out.append({"deployment_id": row["deployment_id"], "column": column,
                                "before": _text(previous[column]), "after": _text(row[column]),
                                "partition": row["partition"]})
        previous = row
    return out


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def conflicts(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """``[{deployment_id, partition, rows: {requests, steps, rounds}, analysed}]``: each
    deployment and partition whose ``deployments`` rows differ; ``rows`` counts the clean
    rows of that deployment in that partition (in every partition when the table is not
    partitioned like deployments); ``analysed`` says whether another partition's version
    keeps the deployment in the report."""
    if not _exists(con, CONFLICTS_TABLE):
        return []
    analysed = {d for (d,) in con.execute("select deployment_id from deployments").fetchall()}
    result = con.execute(f"select * from {CONFLICTS_TABLE} order by deployment_id, partition")
    names = [d[0] for d in result.description]
    out = []
    for values in result.fetchall():
        row = dict(zip(names, values))
        out.append({"deployment_id": row["deployment_id"], "partition": row["partition"],
                    "rows": {t: row[t] for t in DEPENDENT_TABLES if t in row},
                    "analysed": row["deployment_id"] in analysed})
    return out


def notes(found_changes: list[dict[str, Any]], found_conflicts: list[dict[str, Any]]) -> list[str]:
    """One note per deployment and partition where columns changed, one per conflict."""
    out = []
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for c in found_changes:
        grouped.setdefault((c["deployment_id"], c["partition"]), []).append(c)
    for (dep, partition), cs in grouped.items():
        what = ", ".join(f"{c['column']} {c['before']} → {c['after']}" for c in cs)
        out.append(f"{dep}: {what} on {partition}; each date's row is that date's configuration, the "
                   f"deployment is analysed across all of them (--by {cs[0]['column']} slices it)")
    for c in found_conflicts:
        where = f" on {c['partition']}" if c["partition"] else ""
        needed = ", ".join(f"{n:,} {table}" for table, n in c["rows"].items())
        left = ("the report keeps its other dates' configuration" if c["analysed"]
                else "it has no other row, so it is left out of the summary")
        out.append(f"{c['deployment_id']}: deployments rows that differ{where} (duplicate_key), so which "
                   f"configuration its {needed}{where} ran is unknown; {left}, and its verdict is unknown")
    return out
