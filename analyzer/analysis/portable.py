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

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark

from ..resources import resource_dir
from . import buckets
from .views import DEFAULT_REPEAT_N, View, config_macros_sql, discover_views

# Functions Spark SQL runs that sqlglot's Spark parser does not list by name.
_SPARK_BUILTINS_SQLGLOT_MISSES = frozenset({"xxhash64", "unix_micros", "timestamp_micros", "collect_set", "collect_list", "array_sort", "try_element_at", "isnan", "double", "conv",
                                            "percentile", "named_struct", "transform"})


@dataclass(frozen=True)
class Macro:
    name: str
    parameters: tuple[str, ...]
    body: exp.Expression


class MacroSet(dict):
    """Macros by name, with ``key``: the text they were parsed from. Two sets with one key
    are the same macros, so what is transpiled with them is kept by that key
    (``spark_sql``): the heavy pass transpiles about 90 statements a run, and parsing and
    rendering them again cost about 10 s of a report's driver."""

    def __init__(self, key: str, items: Mapping[str, Macro]):
        super().__init__(items)
        self.key = key


def macros(repeat_n: int = DEFAULT_REPEAT_N, config=None) -> MacroSet:
    """Every macro the views may call, parsed from the same text that creates them in DuckDB;
    the thresholds are ``config``'s (an ``analysis.config.Config``), else the defaults."""
    parts = ", ".join(f"s[i - {j}]" for j in range(repeat_n, 0, -1))
    text = "\n".join([
        f"create macro repeat_n() as {repeat_n};",
        f"create macro ngram_hash(s, i) as hash({parts}, s[i]);",
        buckets.macros_sql(),
        (resource_dir("sql") / "macros.sql").read_text(encoding="utf-8"),
        config_macros_sql(config),
    ])
    return _parsed_macros(text)


@lru_cache(maxsize=16)
def _parsed_macros(text: str) -> MacroSet:
    found = {}
    for statement in sqlglot.parse(text, read="duckdb"):
        if isinstance(statement, exp.Create) and str(statement.args.get("kind", "")).upper() == "MACRO":
            udf = statement.this
            name = udf.this.name.lower()
            found[name] = Macro(name, tuple(p.name for p in udf.expressions), statement.expression)
    return MacroSet(text, found)


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


# Where Spark needs another formulation of the same value. Each is exact: the same
# result from either engine, checked by the parity tests (tests/test_spark.py).
_SPARK_FUNCTIONS = {
    # 64-bit hashes for join keys and n-grams: Spark's hash() is 32-bit murmur3, which
    # would collide among millions of requests. The values differ from DuckDB's hash(),
    # but they are only compared with each other, never shown.
    "hash": "xxhash64",
    "epoch_us": "unix_micros",
}

# Macro bodies Spark needs in another form (same value): DuckDB adds an INTERVAL of
# microseconds, Spark counts microseconds since the epoch; the request group's hex digits.
_SPARK_MACRO_BODIES = {
    "step_end_time": "timestamp_micros(unix_micros(start_time) + cast(round(duration_ms * 1000) as bigint))",
    # DuckDB reads '0x…' text as an integer, Spark converts the hex digits with conv()
    "md5_prefix": "cast(conv(substring(md5(text), 1, 8), 16, 10) as bigint)",
}


def _spark_form(node: exp.Expression) -> exp.Expression:
    """One node of a DuckDB tree in the form Spark runs with the same result."""
    if isinstance(node, exp.Anonymous) and node.name.lower() in _SPARK_FUNCTIONS:
        return exp.Anonymous(this=_SPARK_FUNCTIONS[node.name.lower()], expressions=node.expressions)
    if isinstance(node, exp.Distinct) and isinstance(node.parent, exp.Count):
        # count(distinct (a, b)) counts rows as a whole: a struct in Spark, whose
        # count(distinct a, b) would skip rows with any null field
        node.set("expressions", [exp.Struct(expressions=e.expressions) if isinstance(e, exp.Tuple) else e
                                 for e in node.expressions])
        return node
    if isinstance(node, exp.PercentileCont) and not isinstance(node.parent, exp.WithinGroup):
        # quantile_cont(x, p): the exact quantile interpolated between the two nearest
        # values, which is Spark's percentile (p may be an array: an array of quantiles)
        return exp.Anonymous(this="percentile", expressions=[node.this, node.expression])
    if isinstance(node, exp.Order) and isinstance(node.parent, exp.Corr):
        # an ordered correlation fixes DuckDB's order of addition; Spark has no ordered aggregates
        return node.this
    if isinstance(node, exp.Order) and isinstance(node.parent, (exp.Avg, exp.Sum)):
        # an ordered mean fixes the order DuckDB adds in (last-digit determinism);
        # Spark has no ordered aggregates, and its sum differs at most in those digits
        return node.this
    aggregate = node.this if isinstance(node, exp.Filter) else node
    if isinstance(aggregate, exp.ArrayAgg) and isinstance(aggregate.this, exp.Order):
        inner = aggregate.this.this
        distinct = isinstance(inner, exp.Distinct)
        value = inner.expressions[0] if distinct else inner
        keys = [o.this for o in aggregate.this.expressions]
        if any(o.args.get("desc") for o in aggregate.this.expressions):
            raise sqlglot.errors.UnsupportedError("list(... order by ... desc) has no Spark form here")
        if distinct or [k.sql() for k in keys] == [value.sql()]:
            # list([distinct] g order by g) [filter (where ...)]: Spark collects a set or a
            # list and sorts it
            collected = exp.Anonymous(this="collect_set" if distinct else "collect_list", expressions=[value])
            if isinstance(node, exp.Filter):
                collected = exp.Filter(this=collected, expression=node.expression)
            return exp.Anonymous(this="array_sort", expressions=[collected])
        # list(x order by k1, k2 …): collect (k1, k2, …, x) structs, sort them (field by
        # field, as the order by does), keep x
        fields = []
        for i, key in enumerate(keys):
            fields += [exp.Literal.string(f"k{i}"), key.copy()]
        fields += [exp.Literal.string("v"), value.copy()]
        collected = exp.Anonymous(this="collect_list", expressions=[exp.Anonymous(this="named_struct",
                                                                                  expressions=fields)])
        if isinstance(node, exp.Filter):
            collected = exp.Filter(this=collected, expression=node.expression)
        return sqlglot.parse_one("transform(array_sort(c), e -> e.v)", read="spark").transform(
            lambda n: collected if isinstance(n, exp.Column) and n.name == "c" else n)
    if isinstance(node, exp.Div) and not node.args.get("_spark_double"):
        # DuckDB's / divides as DOUBLE whatever the operands; Spark divides DECIMAL sums
        # as DECIMAL, rounded to the result's scale
        div = exp.Div(this=exp.cast(node.this, "double"), expression=exp.cast(node.expression, "double"))
        div.set("_spark_double", True)
        return div
    inner = node.this.unnest() if isinstance(node, exp.Avg) else None
    if isinstance(inner, exp.Cast) and inner.to.is_type("decimal"):
        # the mean of a DECIMAL (exact_ms): DuckDB divides the exact sum by the count, so
        # equal times average to exactly that time; so does this (Spark's DOUBLE sum would not)
        return exp.Div(this=exp.cast(exp.Sum(this=inner.copy()), "double"), expression=exp.Count(this=inner.copy()))
    if isinstance(node, exp.Avg) and not (isinstance(node.this, exp.Cast) and node.this.is_type("double")):
        # DuckDB's avg() is a DOUBLE, of a DECIMAL too (its exact sum over the count); Spark's
        # avg of a DECIMAL is a DECIMAL rounded to 4 more places, which a fit around the mean
        # magnifies: average the values as DOUBLE
        # (an ordered mean: Spark has no ordered aggregates; see the exp.Order case)
        value = node.this.this if isinstance(node.this, exp.Order) else node.this
        return exp.Avg(this=exp.cast(value, "double"))
    if isinstance(node, exp.Anonymous) and node.name.lower() == "isfinite":
        # NaN and ±inf read as null (docs/trace-format.md); Spark has no isfinite()
        (x,) = node.expressions
        return exp.paren(sqlglot.parse_one(
            "not isnan(x) and x not in (double('inf'), double('-inf'))", read="spark").transform(
                lambda n: x.copy() if isinstance(n, exp.Column) and n.name == "x" else n))
    if isinstance(node, exp.Bracket) and len(node.expressions) == 1:
        # DuckDB's list[i] is 1-based and null out of range: Spark's try_element_at is
        # both; sqlglot stores a literal index 0-based and any other as written)
        (index,) = node.expressions
        if isinstance(index, exp.Literal) and not index.is_string:
            index = exp.Literal.number(int(index.this) + 1)
        return exp.Anonymous(this="try_element_at", expressions=[node.this, index])
    if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
        node.set("materialized", None)      # a planner hint Spark does not take
        return node
    if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.INT128:
        return exp.DataType.build("decimal(38, 0)")
    return node


def spark_macros(repeat_n: int = DEFAULT_REPEAT_N, config=None) -> MacroSet:
    """The macros with the bodies Spark needs where its form differs."""
    return _spark_macros(macros(repeat_n, config).key)


@lru_cache(maxsize=16)
def _spark_macros(text: str) -> MacroSet:
    known = dict(_parsed_macros(text))
    for name, body in _SPARK_MACRO_BODIES.items():
        known[name] = Macro(name, known[name].parameters, sqlglot.parse_one(body, read="spark"))
    _SPARK_MACROS[text] = found = MacroSet(text, known)
    return found


# The Spark macro sets made so far, by the text they were parsed from (what spark_sql's
# cache is keyed by)
_SPARK_MACROS: dict[str, MacroSet] = {}


def spark_sql(view: View | str, known: Mapping[str, Macro] | None = None) -> str:
    """A view (or DuckDB SQL text) as Spark SQL, macros inlined. Raises
    ``sqlglot.errors.UnsupportedError`` for a construct sqlglot cannot render for Spark."""
    text = view.sql if isinstance(view, View) else view
    known = spark_macros() if known is None else known
    if isinstance(known, MacroSet) and _SPARK_MACROS.get(known.key) is known:
        return _spark_sql_kept(text, known.key)
    return _transpile(text, known)


@lru_cache(maxsize=1024)
def _spark_sql_kept(text: str, key: str) -> str:
    return _transpile(text, _SPARK_MACROS[key])


def _transpile(text: str, known: Mapping[str, Macro]) -> str:
    tree = inline_macros(sqlglot.parse_one(text, read="duckdb"), known)
    # sqlglot does not descend into a node a transform replaced: repeat until nothing changes
    # (every rewrite replaces what it matched, so a second pass never applies it twice)
    for _ in range(10):
        before = tree.sql(dialect="duckdb")
        tree = tree.transform(_spark_form)
        if tree.sql(dialect="duckdb") == before:
            break
    return tree.sql(dialect="spark", unsupported_level=sqlglot.ErrorLevel.RAISE)


def non_portable(view: View, known: dict[str, Macro] | None = None) -> list[str]:
    """What in ``view`` Spark cannot run: unsupported constructs, and calls left unknown
    in the Spark text. Empty when the whole view transpiles to functions Spark has."""
    try:
        text = spark_sql(view, known)
    except (sqlglot.errors.UnsupportedError, sqlglot.errors.ParseError) as exc:
        return [f"unsupported: {str(exc).splitlines()[0]}"]
    try:
        tree = sqlglot.parse_one(text, read="spark")
    except sqlglot.errors.ParseError as exc:
        # a type Spark has no name for (UBIGINT, say) comes out as text Spark can't read
        return [f"unsupported: {str(exc).splitlines()[0]}"]
    unknown = {node.name.lower() for node in tree.find_all(exp.Anonymous)}
    spark = {name.lower() for name in Spark.Parser.FUNCTIONS} | _SPARK_BUILTINS_SQLGLOT_MISSES
    return sorted(f"function {name}" for name in unknown - spark)


def portability(sql_dir=None) -> dict[str, list[str]]:
    """view name → what Spark cannot run in it, for every view that has something."""
    known = spark_macros()
    views = discover_views(sql_dir)
    return {name: problems for name, view in sorted(views.items()) if (problems := non_portable(view, known))}
