"""Create the views in ``sql/``: one view per file, the file name is the view name.

A file whose header has the line ``-- materialized: table`` is created as a
table instead: for work too heavy to repeat on every query (n-gram hashing).

Dependencies come from the SQL itself: a view depends on every other view that
it reads (a name after FROM or JOIN). The views are created in
topological order, so adding a file never needs a registry edit. A cycle is an
error that names the cycle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import duckdb

from .resources import resource_dir

LAYERS = ("clean", "metrics")

_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)
_STRING = re.compile(r"'(?:[^']|'')*'")
# A relation is read where its name follows FROM or JOIN; column aliases that
# happen to share a view's name are not dependencies.
_RELATION = re.compile(r'\b(?:from|join)\s+(?:"([^"]+)"|([A-Za-z_][A-Za-z0-9_]*))', re.I)


class ViewError(Exception):
    """A problem with the SQL files themselves (cycle, duplicate name, bad SQL)."""


_MATERIALIZED = re.compile(r"^--\s*materialized:\s*table\s*$", re.M)

DEFAULT_REPEAT_N = 3


@dataclass(frozen=True)
class View:
    name: str
    layer: str
    path: Path
    sql: str
    purpose: str
    materialized: bool = False

    def references(self) -> set[str]:
        code = _STRING.sub("''", _COMMENT.sub(" ", self.sql))
        return {(m.group(1) or m.group(2)).lower() for m in _RELATION.finditer(code)}


def discover_views(sql_dir: Path | None = None) -> dict[str, View]:
    sql_dir = sql_dir or resource_dir("sql")
    views: dict[str, View] = {}
    for layer in LAYERS:
        for path in sorted((sql_dir / layer).glob("*.sql")):
            name = path.stem.lower()
            if name in views:
                raise ViewError(f"{path}: view {name} is also defined in {views[name].path}")
            text = path.read_text(encoding="utf-8").strip().rstrip(";").strip()
            purpose = " ".join(line[2:].strip() for line in text.splitlines()
                               if line.startswith("--")).strip()
            views[name] = View(name, layer, path, text, purpose, bool(_MATERIALIZED.search(text)))
    return views


def dependency_order(views: dict[str, View]) -> list[str]:
    graph = {name: sorted((view.references() & views.keys()) - {name}) for name, view in views.items()}
    try:
        return list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        cycle = exc.args[1]
        raise ViewError("views form a cycle: " + " -> ".join(cycle)) from None


def create_macros(con: duckdb.DuckDBPyConnection, repeat_n: int = DEFAULT_REPEAT_N,
                  sql_dir: Path | None = None) -> None:
    """Macros the views call. They are stored in the database, so plain duckdb has them too.

    ``ngram_hash(s, i)`` hashes the (n+1)-gram of list ``s`` ending at 1-based index i.
    It is written out with n + 1 arguments rather than as a list slice, which would
    allocate a list per token and run about 15x slower.
    """
    if not 1 <= repeat_n <= 32:
        raise ValueError(f"repeat n must be between 1 and 32, got {repeat_n}")
    parts = ", ".join(f"s[i - {j}]" for j in range(repeat_n, 0, -1))
    con.execute(f"create or replace macro repeat_n() as {repeat_n}")
    con.execute(f"create or replace macro ngram_hash(s, i) as hash({parts}, s[i])")
    macros = (sql_dir or resource_dir("sql")) / "macros.sql"
    if macros.is_file():
        con.execute(macros.read_text(encoding="utf-8"))


def create_views(con: duckdb.DuckDBPyConnection, sql_dir: Path | None = None, *,
                 repeat_n: int = DEFAULT_REPEAT_N, progress=None, temporary: bool = False) -> list[str]:
    """Create the macros and every view; returns the view names in creation order.

    ``progress`` is told about each materialised table: those are the long steps.
    """
    create_macros(con, repeat_n, sql_dir)
    views = discover_views(sql_dir)
    order = dependency_order(views)
    for name in order:
        view = views[name]
        kind = ("temp table" if temporary else "table") if view.materialized else "view"
        if view.materialized and progress:
            progress(f"computing {name}")
        try:
            con.execute(f'create or replace {kind} "{name}" as\n{view.sql}')
        except duckdb.Error as exc:
            raise ViewError(f"{view.path}: cannot create view {name}: {str(exc).splitlines()[0]}") from None
    return order
