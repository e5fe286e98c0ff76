"""The scheduled report: one date's partitions, dated outputs, history and regression flags.

``run_nightly`` reads only the ``date=D`` partitions, writes
``OUT/D/report.{md,json,html}`` (each checked before the analysis runs and written
by ``outputs.write_output``: aside and renamed, through a symbolic link to its target,
in place into a FIFO or a device), compares D's headline metrics with up to
``window_days`` earlier dates in ``OUT/history.parquet`` that were not flagged
themselves (``decide.regression.check_regressions``: past the threshold and the window's
robust spread, only with ``min_history_dates`` earlier dates, and from
``[nightly] accept_since`` on when D is on or after it), and then upserts D's
rows into that history (written aside and renamed; it is read back, so it must be
a regular file, or a link to one). The history holds no flags:
they are replayed from its metrics on every run.

Runs for different dates may overlap (a backfill with ``xargs -P``, long cron
runs): from reading the history to renaming the new one over it, a run holds
``OUT/history.parquet.lock`` (``history.locked``), so every run's rows
survive. A run that waits longer than ``lock_timeout`` seconds raises
``history.HistoryLocked``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from . import api
from .analysis import history
from .decide import regression
from .analysis.config import Config, load_config
from .errors import EnvironmentProblem, InputProblem
from .ingest.load import Progress
from .render.regressions import flag_line, status_lines

REPORT_FORMATS = ("md", "json", "html")


@dataclass
class NightlyResult:
    date: dt.date
    out_dir: Path
    regressions: list[dict]
    gates_failed: bool
    regression_check: dict
    # The check's outcome and each flag in words (render.regressions), for the CLI to print as they are.
    regression_lines: list[str]
    flag_lines: list[str]
    # the speculative deployments whose verdict is not ship or cap (api.check_failures)
    check_failures: list[dict] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        return 1 if self.regressions or self.gates_failed else 0


def parse_date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise InputProblem(f"--date {text!r} is not a date: expected YYYY-MM-DD") from None


def run_nightly(traces: str | Path, date: str, out: str | Path, *, config: Config | None = None,
                memory_limit: str = api.DEFAULT_MEMORY_LIMIT, progress: Progress | None = None,
                lock_timeout: float = history.LOCK_TIMEOUT, temp_dir: str | Path | None = None,
                cache: api.Cache | None = None) -> NightlyResult:
    day = parse_date(date)
    config = config or load_config(None)
    out = Path(out)
    history_path = out / "history.parquet"
    day_dir = out / day.isoformat()
    reports = {fmt: day_dir / f"report.{fmt}" for fmt in REPORT_FORMATS}
    # Before the analysis: a run that can't write its outputs says so at once, not at the end.
    for path in reports.values():
        api.check_output(path, folders_created=True)
    api.check_output(history_path, folders_created=True, regular_because=history.HISTORY_REGULAR)
    api.check_output(history.lock_path(history_path), folders_created=True, regular_because=history.LOCK_REGULAR)
    ws = api.open_traces(traces, date=day.isoformat(), memory_limit=memory_limit, progress=progress,
                         temp_dir=temp_dir, cache=cache)
    try:
        doc = api.report_document(ws, config=config, progress=progress)
    finally:
        ws.close()

    today = history.history_rows(doc, day)
    doc["date"] = day.isoformat()
    if progress:
        progress(f"locking {history.lock_path(history_path)}")
    # Held from the read to the rename: another run's rename in between would be overwritten.
    with history.locked(history_path, timeout=lock_timeout):
        previous = history.read_history(history_path)
        combined = history.merge(previous, today)
        doc["regression_check"], doc["regressions"] = regression.check_regressions(
            combined, day, config.regression, config.nightly)

        if progress:
            progress(f"writing {day_dir}")
        try:
            day_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot create {day_dir}: {exc.strerror or exc}") from None
        for fmt in ("md", "json"):
            api.write_output(reports[fmt], api.render_report(doc, fmt))
        from .render import html    # matplotlib: imported only by the runs that draw

        api.write_output(reports["html"], html.render(doc, history=combined,
                                                      title=f"specan nightly {day.isoformat()}"))
        history.write_atomic(history_path, combined)
    failures = api.check_failures(doc)
    return NightlyResult(day, day_dir, doc["regressions"], bool(failures), doc["regression_check"],
                         status_lines(doc["regression_check"], doc["regressions"]),
                         [flag_line(r, doc["date"]) for r in doc["regressions"]], failures)
