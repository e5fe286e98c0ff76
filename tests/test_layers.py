"""The package layers: ingest → analysis → decide → render, with the CLI on top. An import
that points up the stack (analysis importing render, say) or across two packages
of the same rank is a failure, so the tree keeps showing the data flow."""

import ast
from pathlib import Path

import analyzer

PACKAGE = Path(analyzer.__file__).resolve().parent

# Rank of each top-level part of the package: a module may import parts of a lower
# rank, and modules of its own part.
RANK = {"resources": 0, "errors": 0, "outputs": 1, "ingest": 1, "analysis": 2, "record": 2, "decide": 3, "simulate": 3,
        "spark": 3, "render": 4, "api": 5, "nightly": 6, "cli": 7, "__main__": 8, "__init__": 0}


def part_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 2:
        parts = parts[:-1]
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every analyzer module this file imports, relative imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "analyzer" or target.startswith("analyzer."):
                found.add(target)
                found.update(f"{target}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("analyzer"))
    return {m for m in found if m.count(".") >= 1}


def violations() -> list[str]:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = part_of(module_name(path))
        for target in sorted(imports(path)):
            other = part_of(target)
            if other not in RANK or other == me:
                continue
            if RANK[other] > RANK[me] or (RANK[other] == RANK[me] and other != me):
                bad.append(f"{module_name(path)} imports {target}")
    return bad


def test_every_part_of_the_package_has_a_rank():
    parts = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))}
    assert parts <= RANK.keys(), parts - RANK.keys()


def test_no_module_imports_up_the_stack():
    assert violations() == []


def test_the_checker_catches_an_upward_import(tmp_path, monkeypatch):
    # the layout this issue found: analysis/gates.py reaching into the renderer
    fake = tmp_path / "analyzer"
    (fake / "analysis").mkdir(parents=True)
    (fake / "render").mkdir()
    for d in (fake, fake / "analysis", fake / "render"):
        (d / "__init__.py").write_text("")
    (fake / "analysis" / "gates.py").write_text("def f():\n    from ..render.markdown import table\n")
    (fake / "render" / "markdown.py").write_text("from ..analysis import gates\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", fake)
    assert violations() == ["analyzer.analysis.gates imports analyzer.render.markdown",
                            "analyzer.analysis.gates imports analyzer.render.markdown.table"]


def test_the_cli_is_a_thin_layer_over_the_api():
    # click parsing and exit statuses only: everything it runs comes through analyzer.api
    # (and analyzer.nightly, the scheduled run built on it)
    reached = {m.rsplit(".", 1)[0] if m.count(".") > 1 else m for m in imports(PACKAGE / "cli.py")}
    assert reached <= {"analyzer.api", "analyzer.nightly", "analyzer.errors"}, reached


def module_graph() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports (at the top
    or inside a function: either is a dependency a reader has to follow)."""
    paths = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    return {name: {m for m in imports(path) if m in paths and m != name} for name, path in paths.items()}


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    from graphlib import CycleError, TopologicalSorter

    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        return exc.args[1]
    return None


def test_no_modules_import_each_other_in_a_circle():
    # render/markdown once imported render/gates (and quant, recommend) inside functions,
    # and they imported markdown's number helpers: those live in render/cells now
    assert import_cycle(module_graph()) is None


def test_the_cycle_check_catches_a_circle_through_a_function_level_import(tmp_path, monkeypatch):
    fake = tmp_path / "analyzer"
    (fake / "render").mkdir(parents=True)
    for d in (fake, fake / "render"):
        (d / "__init__.py").write_text("")
    (fake / "render" / "gates.py").write_text("from .markdown import table\n")
    (fake / "render" / "markdown.py").write_text("def f():\n    from .gates import g\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", fake)
    cycle = import_cycle(module_graph())
    assert cycle is not None and set(cycle) == {"analyzer.render.gates", "analyzer.render.markdown"}
