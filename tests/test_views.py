"""analyzer.views: discovery, dependency order from the SQL text, cycle errors."""

from pathlib import Path

import duckdb
import pytest

from analyzer.views import ViewError, create_views, dependency_order, discover_views


def write_sql(root: Path, layer: str, name: str, body: str) -> None:
    (root / layer).mkdir(parents=True, exist_ok=True)
    (root / layer / f"{name}.sql").write_text(body)


def test_order_follows_references_not_file_names(tmp_path):
    # a_top reads b_mid, which reads c_base: alphabetical order would be wrong.
    write_sql(tmp_path, "metrics", "a_top", "-- top\nselect x + 1 as x from b_mid")
    write_sql(tmp_path, "metrics", "b_mid", "select x * 2 as x from c_base;")
    write_sql(tmp_path, "clean", "c_base", "select 1 as x")
    order = dependency_order(discover_views(tmp_path))
    assert order.index("c_base") < order.index("b_mid") < order.index("a_top")
    con = duckdb.connect()
    create_views(con, tmp_path)
    assert con.execute("select x from a_top").fetchone() == (3,)


def test_names_in_comments_and_strings_are_not_dependencies(tmp_path):
    write_sql(tmp_path, "metrics", "v1", "-- unlike v2, this one\nselect 'v2' as name")
    write_sql(tmp_path, "metrics", "v2", "select * from v1")
    assert dependency_order(discover_views(tmp_path)) == ["v1", "v2"]


def test_cycle_error_names_the_cycle(tmp_path):
    write_sql(tmp_path, "metrics", "p", "select * from q")
    write_sql(tmp_path, "metrics", "q", "select * from r")
    write_sql(tmp_path, "metrics", "r", "select * from p")
    with pytest.raises(ViewError) as err:
        dependency_order(discover_views(tmp_path))
    message = str(err.value)
    assert message.startswith("views form a cycle: ")
    cycle = message.removeprefix("views form a cycle: ").split(" -> ")
    assert cycle[0] == cycle[-1] and sorted(set(cycle)) == ["p", "q", "r"]


def test_same_view_name_in_two_layers_is_an_error(tmp_path):
    write_sql(tmp_path, "clean", "dup", "select 1")
    write_sql(tmp_path, "metrics", "dup", "select 2")
    with pytest.raises(ViewError, match="view dup is also defined in"):
        discover_views(tmp_path)


def test_bad_sql_names_the_file(tmp_path):
    write_sql(tmp_path, "metrics", "broken", "select * from no_such_table")
    with pytest.raises(ViewError, match=r"broken\.sql: cannot create view broken"):
        create_views(duckdb.connect(), tmp_path)


def test_shipped_views_each_open_with_purpose_and_grain():
    views = discover_views()
    for view in views.values():
        first = view.sql.splitlines()[0]
        assert first.startswith("--"), f"{view.path} should open with its purpose"
        assert "grain" in view.sql.lower(), f"{view.path} should state its grain"
