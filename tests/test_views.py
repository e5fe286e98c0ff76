"""analyzer.views: discovery, dependency order from the SQL text, cycle errors."""

from pathlib import Path

import duckdb
import pytest

from analyzer.analysis.views import ViewError, create_macros, create_views, dependency_order, discover_views, layer_violations


def write_sql(root: Path, layer: str, name: str, body: str) -> None:
    (root / layer).mkdir(parents=True, exist_ok=True)
    (root / layer / f"{name}.sql").write_text(body)


def test_order_follows_references_not_file_names(tmp_path):
    # a_top reads b_mid, which reads c_base: alphabetical order would be wrong.
    write_sql(tmp_path, "marts", "a_top", "-- top\nselect x + 1 as x from b_mid")
    write_sql(tmp_path, "marts", "b_mid", "select x * 2 as x from c_base;")
    write_sql(tmp_path, "staging", "c_base", "select 1 as x")
    order = dependency_order(discover_views(tmp_path))
    assert order.index("c_base") < order.index("b_mid") < order.index("a_top")
    con = duckdb.connect()
    create_views(con, tmp_path)
    assert con.execute("select x from a_top").fetchone() == (3,)


def test_names_in_comments_and_strings_are_not_dependencies(tmp_path):
    write_sql(tmp_path, "marts", "v1", "-- unlike v2, this one\nselect 'v2' as name")
    write_sql(tmp_path, "marts", "v2", "select * from v1")
    assert dependency_order(discover_views(tmp_path)) == ["v1", "v2"]


def test_cycle_error_names_the_cycle(tmp_path):
    write_sql(tmp_path, "marts", "p", "select * from q")
    write_sql(tmp_path, "marts", "q", "select * from r")
    write_sql(tmp_path, "marts", "r", "select * from p")
    with pytest.raises(ViewError) as err:
        dependency_order(discover_views(tmp_path))
    message = str(err.value)
    assert message.startswith("views form a cycle: ")
    cycle = message.removeprefix("views form a cycle: ").split(" -> ")
    assert cycle[0] == cycle[-1] and sorted(set(cycle)) == ["p", "q", "r"]


def test_same_view_name_in_two_layers_is_an_error(tmp_path):
    write_sql(tmp_path, "staging", "dup", "select 1")
    write_sql(tmp_path, "marts", "dup", "select 2")
    with pytest.raises(ViewError, match="view dup is also defined in"):
        discover_views(tmp_path)


def test_bad_sql_names_the_file(tmp_path):
    write_sql(tmp_path, "marts", "broken", "select * from no_such_table")
    with pytest.raises(ViewError, match=r"broken\.sql: cannot create view broken"):
        create_views(duckdb.connect(), tmp_path)


def test_shipped_views_each_open_with_purpose_and_grain():
    views = discover_views()
    for view in views.values():
        first = view.sql.splitlines()[0]
        assert first.startswith("--"), f"{view.path} should open with its purpose"
        assert "grain" in view.sql.lower(), f"{view.path} should state its grain"


def test_a_cte_named_like_a_view_is_not_a_dependency(tmp_path):
    # "recent" reads its own CTE called "older", not the view older; with a regex
    # over FROM/JOIN the two would form a cycle.
    write_sql(tmp_path, "marts", "older", "select * from recent")
    write_sql(tmp_path, "marts", "recent", "with older as (select 1 as x) select x from older")
    views = discover_views(tmp_path)
    assert views["recent"].references == set()
    assert dependency_order(views) == ["recent", "older"]


def test_materialization_is_declared_in_one_file(tmp_path):
    write_sql(tmp_path, "staging", "base", "-- a comment saying materialized: table changes nothing\nselect 1 as x")
    write_sql(tmp_path, "marts", "heavy", "select x from base")
    (tmp_path / "materialized.toml").write_text('tables = ["heavy"]\n')
    views = discover_views(tmp_path)
    assert (views["base"].materialized, views["heavy"].materialized) == (False, True)
    con = duckdb.connect()
    create_views(con, tmp_path)
    kinds = dict(con.execute("select table_name, table_type from information_schema.tables "
                             "where table_name in ('base', 'heavy')").fetchall())
    assert kinds == {"base": "VIEW", "heavy": "BASE TABLE"}


def test_materializing_an_unknown_view_is_an_error(tmp_path):
    write_sql(tmp_path, "marts", "real", "select 1")
    (tmp_path / "materialized.toml").write_text('tables = ["real", "imagined"]\n')
    with pytest.raises(ViewError, match=r"materialized\.toml: no view named imagined"):
        discover_views(tmp_path)


def test_a_view_reading_a_later_layer_is_reported(tmp_path):
    write_sql(tmp_path, "staging", "early", "select * from late")
    write_sql(tmp_path, "marts", "late", "select 1 as x")
    assert layer_violations(discover_views(tmp_path)) == ["staging/early reads marts/late"]


def test_shipped_views_read_only_their_own_or_earlier_layers():
    views = discover_views()
    assert {v.layer for v in views.values()} == {"staging", "intermediate", "marts"}
    assert layer_violations(views) == []


def test_bucket_macros_come_from_the_seed():
    con = duckdb.connect()
    create_macros(con)
    got = con.execute("""
        select batch_bucket(1), batch_bucket(2), batch_bucket(3), batch_bucket(512), batch_bucket(513),
               context_bucket(1023), context_bucket(1024), context_bucket(40000),
               temperature_bucket(null), temperature_bucket(0), temperature_bucket(0.5), temperature_bucket(0.7),
               temperature_bucket(1.5), batch_bucket(null), batch_bucket_min('33-64'), context_bucket_min('2k-4k')
    """).fetchone()
    assert got == ("1", "2", "3-4", "257-512", "513+", "0-1k", "1k-2k", "32k+",
                   "unknown", "0", "(0,0.5]", "(0.5,1]", ">1", None, 33, 2048)
    seeded = con.execute("select kind, count(*) from buckets group by kind order by kind").fetchall()
    assert seeded == [("batch", 11), ("context", 7), ("temperature", 5)]
