"""Tabular output for ``specan sql`` and the text summaries: aligned text, CSV, JSON."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import math
from collections.abc import Sequence


def _cell(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "NULL"
    return str(value)


def aligned(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain aligned table; numbers right-aligned, text left-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(row[i], (int, float, decimal.Decimal)) or row[i] is None for row in rows) and rows
               for i in range(len(columns))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric)).rstrip()

    out = [line(list(columns)), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    return "\n".join(out) + "\n"


def to_csv(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if v is None else v for v in row])
    return buf.getvalue()


def json_default(value: object) -> object:
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return str(value)


def finite(value: object) -> object:
    """Replace NaN / inf by None, recursively: JSON output never holds NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def to_json(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    records = [finite(dict(zip(columns, row))) for row in rows]
    return json.dumps(records, default=json_default, allow_nan=False, ensure_ascii=False) + "\n"
