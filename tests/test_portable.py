"""analyzer.analysis.portable: the views as Spark SQL, macros inlined, and the check
that catches a view using something Spark can't run (issue 14, its first step)."""

from pathlib import Path

import duckdb
import sqlglot

from analyzer.analysis import portable
from analyzer.analysis.views import View, create_macros, scaleout_split


def view(sql: str, name: str = "v") -> View:
    return View(name, "marts", Path(f"{name}.sql"), sql, "")


def test_inlined_macros_compute_what_the_macros_compute():
    # the same expressions with DuckDB's macros and with their bodies put in place
    sql = ("select batch_bucket(5) as b, context_bucket(4096) as c, temperature_bucket(null) as t, "
           "packed_key_gap_us(8796093022208 * 3 + 2199023255552 + 123) as gap, exact_ms(1.25) as ms")
    con = duckdb.connect()
    create_macros(con)
    with_macros = con.execute(sql).fetchone()
    inlined = portable.inline_macros(sqlglot.parse_one(sql, read="duckdb"), portable.macros())
    assert not any(isinstance(n, sqlglot.exp.Anonymous) for n in inlined.find_all(sqlglot.exp.Anonymous))
    plain = duckdb.connect()                   # no macros defined here
    assert plain.execute(inlined.sql(dialect="duckdb")).fetchone() == with_macros
    assert with_macros[:3] == ("5-8", "4k-8k", "unknown")


def test_a_duckdb_only_function_is_caught():
    assert portable.non_portable(view("select to_microseconds(5) as x")) == ["function to_microseconds"]
    assert portable.non_portable(view("select list_reduce([1, 2], lambda a, b: a + b) as x")) == [
        "function list_reduce"]
    assert portable.non_portable(view("select 1 + 2 as x, upper('a') as y")) == []


def test_macro_calls_become_spark_sql():
    text = portable.spark_sql(view("select batch_bucket(batch_size) as b from steps"))
    assert "batch_bucket" not in text.lower() and "CASE WHEN" in text


def test_only_views_left_to_the_local_finish_need_duckdb():
    # Spark runs the heavy pass (analyzer.spark); the local finish runs the rest in DuckDB.
    # A heavy view that starts using a DuckDB-only construct makes this fail.
    found = portable.portability()
    assert set(found) == {"headline_intervals", "latency_summary", "position_acceptance"}
    # the accept length's bootstrap hashes (seed, replicate, group) packed into a UBIGINT
    # (macro bootstrap_hash), a type Spark has no name for: the Spark text does not parse
    # (it also sums with list_dot_product, over the fetched group cells)
    assert [problem.split(". Line")[0] for problem in found["headline_intervals"]] == [
        "unsupported: Expected TYPE after CAST"]
    assert found["latency_summary"] == ["function _u"]   # `from t, range(1, 5) as r(i)`: sqlglot emits no valid Spark
    assert found["position_acceptance"] == ["function product"]  # DuckDB's product() aggregate
    assert not set(found) & scaleout_split().heavy
