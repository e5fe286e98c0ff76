"""The batch, context and temperature buckets, defined once in ``sql/seeds/buckets.csv``.

The seed is the only definition. From it come the SQL macros every view calls
(``batch_bucket(batch_size)``, ``context_bucket(context_len)``,
``temperature_bucket(temperature)``, ``<kind>_bucket_min(label)``, the bucket's
position ``<kind>_bucket_position(value)``), the ``buckets`` table stored with the views, and the labels and bounds Python reads.

A value falls in the first bucket (by position) whose ``highest`` it does not
exceed; an empty ``highest`` is unbounded. Position 0, where a kind has it, is
the label of a null value; without it a null value has no bucket.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache

from ..resources import resource_dir

KINDS = {"batch": "batch_size", "context": "context_len", "temperature": "temperature"}


@dataclass(frozen=True)
class Bucket:
    kind: str
    position: int
    label: str
    lowest: float | None
    highest: float | None


def _number(text: str) -> float | int | None:
    if text == "":
        return None
    value = float(text)
    return int(value) if value.is_integer() else value


@cache
def seed() -> tuple[Bucket, ...]:
    with open(resource_dir("sql") / "seeds" / "buckets.csv", newline="", encoding="utf-8") as f:
        return tuple(Bucket(r["kind"], int(r["position"]), r["label"], _number(r["lowest"]), _number(r["highest"]))
                     for r in csv.DictReader(f))


def buckets(kind: str) -> list[Bucket]:
    """The buckets of a kind in order, without the null label."""
    return sorted((b for b in seed() if b.kind == kind and b.position > 0), key=lambda b: b.position)


def labels(kind: str) -> tuple[str, ...]:
    return tuple(b.label for b in buckets(kind))


def bounds(kind: str) -> dict[str, tuple[float | None, float | None]]:
    return {b.label: (b.lowest, b.highest) for b in buckets(kind)}


def _literal(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def macros_sql() -> str:
    """The bucket macros and the ``buckets`` table, as SQL."""
    statements = []
    for kind, argument in KINDS.items():
        null_label = next((b.label for b in seed() if b.kind == kind and b.position == 0), None)
        whens = [f"when {argument} is null then {_literal(null_label)}"]
        ordered = buckets(kind)
        for b in ordered[:-1]:
            whens.append(f"when {argument} <= {_literal(b.highest)} then {_literal(b.label)}")
        last = ordered[-1]
        tail = (f"else {_literal(last.label)}" if last.highest is None
                else f"when {argument} <= {_literal(last.highest)} then {_literal(last.label)}")
        body = "\n        ".join([*whens, tail])
        statements.append(f"create or replace macro {kind}_bucket({argument}) as\n    case\n        {body}\n    end")
        positions = [f"when {argument} is null then "
                     f"{next((str(b.position) for b in seed() if b.kind == kind and b.position == 0), 'null')}"]
        positions += [f"when {argument} <= {_literal(b.highest)} then {b.position}" for b in ordered[:-1]]
        positions.append(f"else {last.position}" if last.highest is None
                         else f"when {argument} <= {_literal(last.highest)} then {last.position}")
        statements.append(f"create or replace macro {kind}_bucket_position({argument}) as\n    case\n        "
                          + "\n        ".join(positions) + "\n    end")
        mins = " ".join(f"when {_literal(b.label)} then {_literal(b.lowest)}" for b in ordered if b.lowest is not None)
        if mins:    # a sort key for labels whose buckets have a lower bound
            statements.append(f"create or replace macro {kind}_bucket_min(label) as case label {mins} end")
    statements.append("create or replace table buckets (kind varchar, position integer, label varchar, "
                      f"lowest double, highest double);\ninsert into buckets values {_seed_rows()}")
    return ";\n".join(statements) + ";\n"


def _seed_rows() -> str:
    """The seed's rows as SQL value tuples (kind, position, label, lowest, highest)."""
    return ", ".join(f"({_literal(b.kind)}, {b.position}, {_literal(b.label)}, {_literal(b.lowest)}, "
                     f"{_literal(b.highest)})" for b in seed())


def relation_sql() -> str:
    """The ``buckets`` table as one query (for an engine that creates it as a view: Spark)."""
    return ("select cast(kind as varchar) as kind, cast(position as integer) as position, "
            "cast(label as varchar) as label, cast(lowest as double) as lowest, cast(highest as double) as highest "
            f"from (values {_seed_rows()}) as t(kind, position, label, lowest, highest)")
