"""What the two benchmark importers share (vllm-bench, sglang-bench, docs/importers.md).

A benchmark client prints one summary per run: the run's totals, not production
traffic. Each run becomes one ``intervals`` row whose ``source`` ends in ``_bench``,
which is how the report tells a benchmark from an engine's own counters. A summary
carries no clock of its own (vLLM's JSON result has a ``date``), so a run without one
ends at ``--time`` or at its file's modification time, with a note saying which; its
start is that end minus the printed benchmark duration.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .common import (ImportInputError, ImportSummary, Overrides, TraceWriter, deployment_row, epoch_us, finish,
                     parse_time)

INTERVAL_COLUMNS = ("deployment_id", "series", "start_time", "end_time", "num_drafts", "num_draft_tokens",
                    "num_accepted_tokens", "accepted_per_position", "source", "generation_tokens_per_s",
                    "reported_accept_length", "reported_accept_length_definition", "reported_accept_rate",
                    "reported_accept_rate_definition")
OPTIONAL = ("start_time", "num_drafts", "num_draft_tokens", "num_accepted_tokens", "accepted_per_position",
            "generation_tokens_per_s", "reported_accept_length", "reported_accept_length_definition",
            "reported_accept_rate", "reported_accept_rate_definition")


@dataclass
class BenchRun:
    """One benchmark run as its summary printed it (None: not printed)."""

    where: str                              # file:line of the run's first line
    end_us: int | None = None               # the run's own end time, where the output has one
    duration_s: float | None = None
    num_drafts: int | None = None
    num_draft_tokens: int | None = None
    num_accepted_tokens: int | None = None
    accepted_per_position: list[int] | None = None
    accept_length: float | None = None
    accept_rate: float | None = None        # 0-1
    output_tokens_per_s: float | None = None
    model: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def speculated(self) -> bool:
        return bool(self.num_drafts) or bool(self.num_draft_tokens) or self.accept_length is not None


@dataclass(frozen=True)
class BenchFormat:
    """What differs between the benchmark clients."""

    source: str                    # the importer's name, e.g. vllm-bench
    interval_source: str           # intervals.source, e.g. vllm_bench
    client: str                    # what printed it, for notes
    accept_length_definition: str
    accept_rate_definition: str | None
    read: Callable[[Path], list[BenchRun]]


def mtime_us(path: Path) -> int:
    return epoch_us(os.stat(path).st_mtime)


def import_bench(fmt: BenchFormat, files: Sequence[str | Path], out: str | Path, deployment_id: str,
                 overrides: Overrides, time: str | None = None) -> ImportSummary:
    """Import every run of every file as one interval of ``deployment_id``."""
    at_time = None
    if time is not None:
        at_time = parse_time(time)
        if at_time is None:
            raise ImportInputError(f"--time {time!r}: expected ISO-8601 or epoch seconds")
    paths = [Path(f) for f in files]
    writer = TraceWriter(Path(out), fmt.source, paths, options=f"deployment={deployment_id} {overrides} time={time}")
    writer.check_layout(("intervals", "import_notes"))
    summary = ImportSummary(fmt.source, Path(out))
    cols: dict[str, list] = {c: [] for c in INTERVAL_COLUMNS}
    runs_total, models, positions, speculated = 0, [], 0, False
    for path in paths:
        runs = fmt.read(path)
        if not runs:
            raise ImportInputError(f"{path}: no {fmt.client} summary found (expected a 'Serving Benchmark "
                                   f"Result' block or its JSON result)")
        fallback = None
        for number, run in enumerate(runs, 1):
            end = run.end_us if run.end_us is not None else at_time
            if end is None:
                fallback = fallback or mtime_us(path)
                end = fallback
            start = end - epoch_us(run.duration_s) if run.duration_s else None
            series = path.name if len(runs) == 1 else f"{path.name}#{number}"
            for text in run.notes:
                summary.note(f"{run.where}: {text}", deployment_id)
            row = {"deployment_id": deployment_id, "series": series, "start_time": start, "end_time": end,
                   "num_drafts": run.num_drafts, "num_draft_tokens": run.num_draft_tokens,
                   "num_accepted_tokens": run.num_accepted_tokens,
                   "accepted_per_position": run.accepted_per_position, "source": fmt.interval_source,
                   "generation_tokens_per_s": run.output_tokens_per_s,
                   "reported_accept_length": run.accept_length,
                   "reported_accept_length_definition": (fmt.accept_length_definition
                                                         if run.accept_length is not None else None),
                   "reported_accept_rate": run.accept_rate,
                   "reported_accept_rate_definition": (fmt.accept_rate_definition
                                                       if run.accept_rate is not None else None)}
            for c in INTERVAL_COLUMNS:
                cols[c].append(row[c])
            runs_total += 1
            models += [run.model] if run.model else []
            positions = max(positions, len(run.accepted_per_position or []))
            speculated |= run.speculated
        if fallback is not None:
            stamp = dt.datetime.fromtimestamp(fallback / 1e6, dt.timezone.utc).isoformat(timespec="seconds")
            summary.note(f"{path.name}: the {fmt.client} summary has no time; its runs end at the file's "
                         f"modification time ({stamp}) — pass --time to set it", deployment_id)
    summary.note(f"{runs_total} {fmt.client} run{'s' if runs_total != 1 else ''}: benchmark traffic, not "
                 "production; one interval per run", deployment_id)
    row = deployment_row(deployment_id, overrides, model=models[0] if models else None, speculated=speculated,
                         num_spec_tokens=positions or None)
    writer.merge_deployment(row, summary)
    writer.add("intervals", cols, times=cols["end_time"], drop_empty_optional=OPTIONAL)
    return finish(writer, summary, deployment_id)
