"""Plain-text summaries printed by ``validate`` and ``load``."""

from __future__ import annotations

import duckdb

from ..ingest.load import LoadSummary
from ..ingest.rules import EXAMPLES_PER_REASON
from ..ingest.schema import TABLE_ORDER


def rejected_examples(con: duckdb.DuckDBPyConnection, per_reason: int = EXAMPLES_PER_REASON) -> dict:
    """A few example row keys per (table, reason), in a stable order."""
    rows = con.execute(
        """select table_name, reason, list(row_key order by row_key)[1:?]
           from rejected_rows group by all""", [per_reason]).fetchall()
    return {(table, reason): keys for table, reason, keys in rows}


def validation_summary(summary: LoadSummary, examples: dict | None = None) -> str:
    lines = [f"{'table':<12} {'read':>10} {'clean':>10} {'rejected':>9}"]
    for table in TABLE_ORDER:
        if not summary.present.get(table):
            lines.append(f"{table:<12} {'-':>10} {'-':>10} {'-':>9}  (absent: optional table)")
            continue
        rejected = sum(summary.rejected.get(table, {}).values())
        note = ""
        merged = summary.rows_read[table] - summary.rows_clean[table] - rejected
        if merged:
            note = f"  ({merged} identical copies merged)"
        lines.append(f"{table:<12} {summary.rows_read[table]:>10} {summary.rows_clean[table]:>10} {rejected:>9}{note}")
    total = summary.rejected_total
    lines += [f"note: {note}" for note in summary.notes]
    lines.append("")
    lines.append(f"rejected rows: {total}")
    for table in TABLE_ORDER:
        for reason, n in sorted(summary.rejected.get(table, {}).items()):
            lines.append(f"  {table:<12} {reason:<28} {n:>8}")
            for key in (examples or {}).get((table, reason), []):
                lines.append(f"      e.g. {key}")
    return "\n".join(lines) + "\n"
