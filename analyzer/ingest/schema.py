"""The trace tables as declared in ``schemas/<table>.json``.

These declarations drive validation (required columns, keys, row rules), the
casts into DuckDB, and the format table in the README.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache

import pyarrow as pa

from ..resources import resource_dir

TABLE_ORDER = ("deployments", "requests", "steps", "rounds", "intervals")

INTEGER_TYPES = ("INTEGER", "BIGINT")


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    required: bool
    meaning: str = ""
    default: object = None
    default_column: str | None = None
    # a link key the writer may store (request_uid, step_uid): an identifier, not a count
    link: bool = False

    @property
    def has_default(self) -> bool:
        return self.default is not None or self.default_column is not None


@dataclass(frozen=True)
class Rule:
    reason: str
    when: str


@dataclass(frozen=True)
class Reference:
    reason: str
    table: str
    columns: tuple[str, ...]
    unless_null: str | None = None
    # the reason when the join matches more than one parent (parents with keys the join does not cover)
    ambiguous_reason: str | None = None


@dataclass(frozen=True)
class TableSchema:
    table: str
    required: bool
    grain: str
    key: tuple[str, ...]
    partitions_in_key: bool
    columns: tuple[Column, ...]
    rules: tuple[Rule, ...] = ()
    references: tuple[Reference, ...] = ()
    merge_identical_rows: bool = False
    negative_count: bool = True
    _by_name: dict = field(default_factory=dict, compare=False, repr=False)

    def column(self, name: str) -> Column:
        return self._by_name[name]

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def required_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.required)

    @property
    def count_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.type in INTEGER_TYPES and not c.link)

    @property
    def link_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.link)

    @property
    def rule_reasons(self) -> tuple[str, ...]:
        """Every rejection reason of this table, in the order rules are applied."""
        reasons = ["null_required", "duplicate_key"]
        if self.negative_count:
            reasons.append("negative_count")
        return tuple(reasons + [r.reason for r in self.rules] + [r.reason for r in self.references]
                     + [r.ambiguous_reason for r in self.references if r.ambiguous_reason])


def _parse(doc: dict) -> TableSchema:
    columns = tuple(
        Column(
            name=c["name"],
            type=c["type"],
            required=bool(c["required"]),
            meaning=c.get("meaning", ""),
            default=c.get("default"),
            default_column=c.get("default_column"),
            link=bool(c.get("link", False)),
        )
        for c in doc["columns"]
    )
    schema = TableSchema(
        table=doc["table"],
        required=bool(doc["required"]),
        grain=doc.get("grain", ""),
        key=tuple(doc["key"]),
        partitions_in_key=bool(doc.get("partitions_in_key", True)),
        columns=columns,
        rules=tuple(Rule(r["reason"], r["when"]) for r in doc.get("rules", [])),
        references=tuple(
            Reference(r["reason"], r["table"], tuple(r["columns"]), r.get("unless_null"), r.get("ambiguous_reason"))
            for r in doc.get("references", [])
        ),
        merge_identical_rows=bool(doc.get("merge_identical_rows", False)),
        negative_count=bool(doc.get("negative_count", True)),
    )
    schema._by_name.update({c.name: c for c in columns})
    return schema


@cache
def load_schemas() -> dict[str, TableSchema]:
    """All table schemas, in the order the row rules check them."""
    directory = resource_dir("schemas")
    schemas = {}
    for table in TABLE_ORDER:
        with open(directory / f"{table}.json", encoding="utf-8") as fh:
            schemas[table] = _parse(json.load(fh))
    return schemas


def format_table_markdown() -> str:
    """The trace-format section of the README, generated from the schemas."""
    out = []
    for schema in load_schemas().values():
        needed = "required" if schema.required else "optional"
        out.append(f"### `{schema.table}` ({needed}): {schema.grain}\n")
        out.append(f"Key: {', '.join(schema.key)}" + (" + partition columns" if schema.partitions_in_key else "") + "\n")
        out.append("| column | type | required | default | meaning |")
        out.append("|---|---|---|---|---|")
        for c in schema.columns:
            if c.default_column:
                default = f"`{c.default_column}`"
            elif c.default is not None:
                default = f"`{json.dumps(c.default)}`" if not isinstance(c.default, str) else f"`{c.default}`"
            else:
                default = ""
            meaning = c.meaning.replace("|", "\\|")
            out.append(f"| {c.name} | {c.type} | {'yes' if c.required else ''} | {default} | {meaning} |")
        out.append("")
        out.append("Row rules, in order: " + ", ".join(f"`{r}`" for r in schema.rule_reasons) + ".")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


# Declared type → the exact Arrow type a writer of traces (the importers, the recorder,
# the simulators) writes.
ARROW = {
    "VARCHAR": pa.string(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "INTEGER[]": pa.list_(pa.int32()),
    "BIGINT[]": pa.list_(pa.int64()),
}


# The optional import_notes table (no schema file: nothing validates it, the report only
# shows it): notes the importers and the recorder leave beside the traces.
IMPORT_NOTES_SCHEMA = pa.schema([
    pa.field("source", pa.string()),
    pa.field("deployment_id", pa.string()),
    pa.field("note", pa.string()),
    pa.field("imported_at", pa.timestamp("us", tz="UTC")),
])


def declared_types(table: str) -> dict[str, str]:
    """``table``'s columns and their declared types, in schema order."""
    return {c.name: c.type for c in load_schemas()[table].columns}


def arrow_schema(table: str, columns=None, declared: dict[str, str] | None = None) -> pa.Schema:
    """The Arrow schema of ``table``'s listed ``columns`` (all of them when None), in that order;
    ``declared`` (name → declared type) stands in for the schema file when given."""
    declared = declared_types(table) if declared is None else declared
    return pa.schema([pa.field(c, ARROW[declared[c]]) for c in (declared if columns is None else columns)])
