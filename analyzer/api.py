"""The library API behind the CLI: open traces or a loaded database, run queries.

Everything the CLI does goes through these functions, so a notebook can do the
same thing without click:

    >>> from analyzer import api
    >>> ws = api.open_traces("sample_traces/")
    >>> ws.con.sql("select * from accept_length").pl()
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import duckdb

from .ingest.load import LoadSummary, Progress, StructuralError, confirm_rounds, load_traces, read_summary
from .analysis.views import DEFAULT_REPEAT_N, create_views

DEFAULT_MEMORY_LIMIT = "3GB"


@dataclass
class Workspace:
    """A DuckDB connection holding clean tables and views, and how they were loaded."""

    con: duckdb.DuckDBPyConnection
    summary: LoadSummary
    scratch: Path | None = None  # a temporary database file, removed on close

    def close(self) -> None:
        self.con.close()
        if self.scratch is not None:
            for leftover in (self.scratch, Path(str(self.scratch) + ".wal")):
                leftover.unlink(missing_ok=True)


def connect(database: str | Path = ":memory:", *, memory_limit: str = DEFAULT_MEMORY_LIMIT,
            read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A connection whose memory is bounded; beyond the limit DuckDB spills to a temp directory."""
    con = duckdb.connect(str(database), read_only=read_only)
    con.execute("set TimeZone = 'UTC'")
    try:
        con.execute(f"set memory_limit = '{memory_limit}'")
    except duckdb.Error as exc:
        con.close()
        raise ValueError(f"invalid --memory-limit {memory_limit!r}: {str(exc).splitlines()[0]}") from None
    con.execute(f"set temp_directory = '{_spill_dir()}'")
    return con


def _spill_dir() -> str:
    return str(_spill_dir_path())


def _spill_dir_path() -> Path:
    path = Path(tempfile.gettempdir()) / "specan_spill"
    path.mkdir(exist_ok=True)
    return path


def open_traces(traces: str | Path, *, date: str | None = None, memory_limit: str = DEFAULT_MEMORY_LIMIT,
                progress: Progress | None = None, views: bool = True,
                repeat_n: int = DEFAULT_REPEAT_N) -> Workspace:
    """Load a trace directory into a scratch database, with every view unless ``views`` is false.

    The scratch database is a temporary file, not memory: DuckDB compresses its
    tables and pages them against ``memory_limit``, so traces larger than memory load.
    """
    fd, name = tempfile.mkstemp(prefix="specan-", suffix=".duckdb", dir=_spill_dir_path())
    os.close(fd)
    scratch = Path(name)
    scratch.unlink()  # DuckDB creates the file itself
    con = connect(scratch, memory_limit=memory_limit)
    try:
        # Without views nothing would confirm rounds read in place, so validate copies them.
        summary = load_traces(con, traces, date=date, progress=progress, rounds_as_view=views)
        if views:
            if progress:
                progress("creating views")
            create_views(con, repeat_n=repeat_n, progress=progress, temporary=True)
            if progress and summary.pending is not None:
                progress("confirming the rounds' key rules from the aggregates")
            if confirm_rounds(con, summary, progress):
                create_views(con, repeat_n=repeat_n, progress=progress, temporary=True)
    except BaseException:
        Workspace(con, None, scratch).close()
        raise
    return Workspace(con, summary, scratch)


def open_database(db: str | Path, *, memory_limit: str = DEFAULT_MEMORY_LIMIT) -> Workspace:
    """Open a database written by ``specan load``."""
    if not Path(db).is_file():
        raise StructuralError(db, "trace_tables", None, "database file not found")
    con = connect(db, memory_limit=memory_limit, read_only=True)
    return Workspace(con, read_summary(con))


def write_database(traces: str | Path, db: str | Path, *, memory_limit: str = DEFAULT_MEMORY_LIMIT,
                   progress: Progress | None = None, repeat_n: int = DEFAULT_REPEAT_N) -> LoadSummary:
    """Write clean tables and views to ``db``. It is built aside and renamed, so a failed
    load never leaves a half-written database behind."""
    db = Path(db)
    partial = db.with_name(db.name + ".partial")
    for leftover in (partial, Path(str(partial) + ".wal")):
        leftover.unlink(missing_ok=True)
    con = connect(partial, memory_limit=memory_limit)
    try:
        summary = load_traces(con, traces, progress=progress)
        if progress:
            progress("creating views")
        create_views(con, repeat_n=repeat_n)
        con.execute("checkpoint")
    except BaseException:
        con.close()
        partial.unlink(missing_ok=True)
        raise
    con.close()
    os.replace(partial, db)
    return summary


def query(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], list[tuple]]:
    """Run one query; return its column names and rows."""
    result = con.execute(sql)
    if result.description is None:
        return [], []
    return [d[0] for d in result.description], result.fetchall()


def report_document(ws: Workspace, config=None, progress: Progress | None = None) -> dict:
    """The report as a JSON-ready document (metrics.md), with gate results under ``gates``."""
    from .analysis.gates import evaluate_gates
    from .analysis.metrics import collect
    from .analysis.quant import quant_matrix

    if progress:
        progress("computing metrics")
    doc = collect(ws.con, ws.summary)
    if progress:
        progress("speculation length: cost model and recommendations")
    doc["tuning"] = tuning_document(ws.con, [d["deployment_id"] for d in doc["deployments"] if d["method"] != "none"])
    if progress:
        progress("quantization matrix")
    doc["quantization"] = quant_matrix(ws.con)
    if progress:
        progress("evaluating gates")
    doc["gates"] = evaluate_gates(ws.con, config)
    return doc


def tuning_document(con, deployment_ids: list[str]) -> dict:
    """Diminishing returns and the recommended speculation length of each speculative deployment."""
    from .analysis.tuning import marginal_returns, recommend

    recommendations = [recommend(con, dep) for dep in deployment_ids]
    return {"recommendations": [{k: v for k, v in r.items() if k != "cost_fits"} for r in recommendations],
            "cost_model": [fit for r in recommendations for fit in r.get("cost_fits", [])],
            "marginal_returns": marginal_returns(con)}


def gates_failed(doc: dict) -> bool:
    from .analysis.gates import any_failed

    return any_failed(doc.get("gates", []))


def render_report(doc: dict, fmt: str) -> str:
    import json

    from .render import markdown, tables

    if fmt == "json":
        return json.dumps(tables.finite(doc), default=tables.json_default, allow_nan=False,
                          ensure_ascii=False, indent=2) + "\n"
    if fmt == "md":
        return markdown.render(doc)
    if fmt == "html":
        from .render import html

        return html.render(doc)
    raise ValueError(f"unknown report format {fmt!r}")
