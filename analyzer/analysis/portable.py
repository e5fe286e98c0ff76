"""The views of ``sql/`` as Spark SQL: one source of each metric, whichever engine runs it.

The views are written for DuckDB and call DuckDB macros (``sql/macros.sql`` and the
bucket macros of the seed). Spark has no macros, so each call is replaced by the
macro's body with its arguments put in place, then sqlglot transpiles the view.
What sqlglot cannot render for Spark raises; a function that is left as an
unknown call in the Spark text (a DuckDB function with no Spark counterpart
that sqlglot knows) is reported by ``non_portable``, so a view that uses a
DuckDB-only construct is caught before any cluster runs it.

This is the first step of the Spark engine (issue 14): the portability check.
Running the heavy pass on Spark and comparing its documents with DuckDB's is
not built yet. The check is necessary, not sufficient: run on Spark 4.3 local
over the sample's clean tables, 8 of the 40 views ran; besides the constructs
named here, sqlglot renders DuckDB's len(list) as Spark's string length(), and
such differences only show when Spark runs the view.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark

from ..resources import resource_dir
from . import buckets
from .views import DEFAULT_REPEAT_N, View, discover_views

# Functions Spark SQL runs that sqlglot's Spark parser does not list by name.
_SPARK_BUILTINS_SQLGLOT_MISSES = frozenset({"hash"})


@dataclass(frozen=True)
class Macro:
    name: str
    parameters: tuple[str, ...]
    body: exp.Expression


def macros(repeat_n: int = DEFAULT_REPEAT_N) -> dict[str, Macro]:
    """Every macro the views may call, parsed from the same text that creates them in DuckDB."""
    parts = ", ".join(f"s[i - {j}]" for j in range(repeat_n, 0, -1))
    text = "\n".join([
        f"create macro repeat_n() as {repeat_n};",
        f"create macro ngram_hash(s, i) as hash({parts}, s[i]);",
        buckets.macros_sql(),
        (resource_dir("sql") / "macros.sql").read_text(encoding="utf-8"),
    ])
    found = {}
    for statement in sqlglot.parse(text, read="duckdb"):
        if isinstance(statement, exp.Create) and str(statement.args.get("kind", "")).upper() == "MACRO":
            udf = statement.this
            name = udf.this.name.lower()
            found[name] = Macro(name, tuple(p.name for p in udf.expressions), statement.expression)
    return found


def inline_macros(tree: exp.Expression, known: dict[str, Macro]) -> exp.Expression:
    """``tree`` with every macro call replaced by the macro's body, arguments in place
    (repeated, so a macro calling another is expanded too)."""
    for _ in range(10):
        changed = False

        def expand(node: exp.Expression) -> exp.Expression:
            nonlocal changed
            name = node.name.lower() if isinstance(node, exp.Anonymous) else None
            if name is None and isinstance(node, exp.Func) and not isinstance(node, exp.Anonymous):
                name = node.sql_name().lower() if node.sql_name().lower() in known else None
            if name not in known:
                return node
            macro = known[name]
            arguments = list(node.expressions) if isinstance(node, exp.Anonymous) else list(node.args.values())
            arguments = [a for a in arguments if isinstance(a, exp.Expression)]
            if len(arguments) != len(macro.parameters):
                return node
            values = dict(zip(macro.parameters, arguments))
            changed = True
            body = macro.body.copy().transform(
                lambda n: exp.paren(values[n.name].copy())
                if isinstance(n, exp.Column) and not n.table and n.name in values else n)
            return exp.paren(body)

        tree = tree.transform(expand)
        if not changed:
            return tree
    raise ValueError("macros expand without end (a macro calls itself?)")


def spark_sql(view: View, known: dict[str, Macro] | None = None) -> str:
    """The view as Spark SQL, macros inlined. Raises ``sqlglot.errors.UnsupportedError``
    for a construct sqlglot cannot render for Spark."""
    tree = inline_macros(sqlglot.parse_one(view.sql, read="duckdb"), known or macros())
    return tree.sql(dialect="spark", unsupported_level=sqlglot.ErrorLevel.RAISE)


def non_portable(view: View, known: dict[str, Macro] | None = None) -> list[str]:
    """What in ``view`` Spark cannot run: unsupported constructs, and calls left unknown
    in the Spark text. Empty when the whole view transpiles to functions Spark has."""
    try:
        text = spark_sql(view, known)
    except (sqlglot.errors.UnsupportedError, sqlglot.errors.ParseError) as exc:
        return [f"unsupported: {str(exc).splitlines()[0]}"]
    unknown = {node.name.lower() for node in sqlglot.parse_one(text, read="spark").find_all(exp.Anonymous)}
    spark = {name.lower() for name in Spark.Parser.FUNCTIONS} | _SPARK_BUILTINS_SQLGLOT_MISSES
    return sorted(f"function {name}" for name in unknown - spark)


def portability(sql_dir=None) -> dict[str, list[str]]:
    """view name → what Spark cannot run in it, for every view that has something."""
    known = macros()
    views = discover_views(sql_dir)
    return {name: problems for name, view in sorted(views.items()) if (problems := non_portable(view, known))}
