"""What every importer shares: errors, the summary, times, the deployments row,
rounds reconciled with usage, and the writer that appends new Parquet files.

The writer never rewrites a file. Each table an import fills gets one new file,
``TRACES/<table>/import-<source>-<UTC time>-<random>.parquet`` (one per date
partition when the directory is partitioned by ``date=``), written aside under
a name the loader ignores and then linked into place, which fails rather than
replace anything.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import hashlib
import io
import json
import math
import os
import re
import shutil
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...errors import InputProblem
from ..load import partition_values
from ..schema import IMPORT_NOTES_SCHEMA, declared_types
from ..schema import arrow_schema as _arrow_schema
from ..uids import uid_columns

DEPLOYMENT_REQUIRED = ("deployment_id", "model", "method", "num_speculative_tokens")

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_US = dt.timedelta(microseconds=1)


@dataclass
class ImportRun:
    """How one ``specan import`` runs, for every importer it calls (``run_import`` sets it).

    ``partition``: None follows the trace directory, "date" writes date= partitions, "none" flat
    files. ``deferred``: when a list, ``finish`` queues (writer, summary) there instead of
    committing, so that every file of every group is read before anything is written
    (``commit_all``). ``read_bytes``: called with the bytes each read from an input takes
    (``--progress``)."""

    partition: str | None = None
    deferred: list | None = None
    read_bytes: Callable[[int], None] | None = None


RUN: contextvars.ContextVar[ImportRun] = contextvars.ContextVar("specan_import_run", default=ImportRun())


# --------------------------------------------------------------------------- errors


class ImportInputError(InputProblem):
    """Input an importer cannot use at all. The CLI prints it on one line and exits 2."""


class MalformedInput(ImportInputError):
    """A file that is not what the source promises: names the file and the line."""

    def __init__(self, path: str | Path, line: int, problem: str):
        self.path, self.line, self.problem = Path(path), line, problem
        super().__init__(f"{path}:{line}: {problem}")


class ImportConflict(ImportInputError):
    """The trace directory can't take this import (a differing deployments row, a single-file table)."""


# --------------------------------------------------------------------------- summary


@dataclass
class Overrides:
    """The deployments values given on the command line (None: infer from the source)."""

    model: str | None = None
    method: str | None = None
    num_speculative_tokens: int | None = None


@dataclass
class ImportSummary:
    source: str
    out: Path
    rows: dict[str, int] = field(default_factory=dict)          # table → rows written
    files: dict[str, list[Path]] = field(default_factory=dict)  # table → files written
    skipped: Counter = field(default_factory=Counter)          # reason → records or lines skipped
    notes: list[tuple[str | None, str]] = field(default_factory=list)  # (deployment_id or None, text)
    deployments: dict[str, str] = field(default_factory=dict)  # deployment_id → new row | already present
    quiet_reasons: frozenset[str] = frozenset()                # skip reasons not persisted as notes
    at: str | None = None                                      # the record being read (file:line), if known
    places: dict[str, list[str]] = field(default_factory=dict)  # reason → its first three places

    def note(self, text: str, deployment_id: str | None = None) -> None:
        self.notes.append((deployment_id, text))

    def skip(self, reason: str, n: int = 1, place: str | None = None) -> None:
        """Count ``n`` records skipped for ``reason``, keeping the first three places
        (``place``, else the record being read)."""
        self.skipped[reason] += n
        place = place or self.at
        if place is not None and len(self.places.setdefault(reason, [])) < 3:
            self.places[reason].append(place)

    def lines(self) -> list[str]:
        """The summary as printed by ``specan import``."""
        out = [f"specan import {self.source} → {self.out}"]
        for dep, status in self.deployments.items():
            out.append(f"  deployment {dep}: {status}")
        width = max([len(t) for t in self.rows] + [8])
        for table, n in self.rows.items():
            files = self.files.get(table, [])
            where = (f"  {files[0]}" if len(files) == 1 else
                     f"  {len(files)} files: {self.out / table}/date=*/{files[0].name}" if files else "")
            out.append(f"  {table:<{width}} {n:>9} row{'s' if n != 1 else ' '}{where}")
        if self.skipped:
            out.append("skipped:")
            for reason, n in sorted(self.skipped.items(), key=lambda kv: (-kv[1], kv[0])):
                first = self.places.get(reason)
                out.append(f"  {n:>9}  {reason}" + (f" (first at {', '.join(first)})" if first else ""))
        if self.notes:
            out.append("notes:")
            for dep, text in self.notes:
                out.append(f"  - {text}" if dep is None else f"  - {dep}: {text}")
        return out

    def persisted_notes(self) -> list[tuple[str | None, str]]:
        """Notes plus the skip counts worth showing in a report."""
        skips = [(None, f"{n} {'record' if n == 1 else 'records'} skipped: {reason}"
                  + (f" (first at {', '.join(self.places[reason])})" if self.places.get(reason) else ""))
                 for reason, n in sorted(self.skipped.items()) if reason not in self.quiet_reasons]
        return self.notes + skips


# --------------------------------------------------------------------------- small parsers


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def epoch_us(seconds: float) -> int:
    return int(round(seconds * 1_000_000))


def datetime_us(moment: dt.datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return (moment - EPOCH) // _US


def parse_time(value) -> int | None:
    """ISO-8601 text (UTC when it has no offset) or epoch seconds → epoch µs; None if neither."""
    if is_number(value):
        return epoch_us(value) if math.isfinite(value) else None
    if isinstance(value, str):
        text = value.strip()
        try:
            return epoch_us(float(text))
        except ValueError:
            pass
        try:
            return datetime_us(dt.datetime.fromisoformat(text))
        except ValueError:
            return None
    return None


def ms_us(ms: float) -> int:
    return int(round(ms * 1000))


def open_input(path: Path, binary: bool = False):
    """An input file opened for reading (text: UTF-8, undecodable bytes replaced), or the
    one-line error that names it."""
    report = RUN.get().read_bytes
    try:
        if report is None:
            return open(path, "rb") if binary else open(path, encoding="utf-8", errors="replace")
        buffered = io.BufferedReader(_Counting(open(path, "rb", buffering=0), report), buffer_size=1 << 20)
        return buffered if binary else io.TextIOWrapper(buffered, encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ImportInputError(f"{path}: can't read ({exc.strerror or exc})") from None


class _Counting(io.RawIOBase):
    """A raw file that reports the bytes each read takes (``--progress``)."""

    def __init__(self, raw, report: Callable[[int], None]):
        self.raw, self.report = raw, report

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self.raw.readinto(buffer)
        if n:
            self.report(n)
        return n

    def close(self) -> None:
        self.raw.close()
        super().close()


_SSE_DATA = re.compile(rb"^data:", re.MULTILINE)
_DECODER = json.JSONDecoder()


def json_values(text: str, path: Path, first_line: int = 1) -> Iterator[tuple[int, object]]:
    """(line number, value) of every JSON value in ``text``, in every form a user saves them in:
    one per line (JSONL), one object per file, pretty-printed (``jq .``), several documents back to
    back (``jq`` without ``-c``), or an array of them (each element is one value, on its own line).

    Text that is not JSON is malformed, named by the line and column where parsing stopped."""
    line, at, end = first_line, 0, len(text)
    counted = 0                 # text[:counted] has been counted into ``line``

    def line_at(pos: int) -> int:
        nonlocal line, counted
        line += text.count("\n", counted, pos)
        counted = pos
        return line

    def skip_space(pos: int) -> int:
        while pos < end and text[pos] in " \t\r\n\ufeff":
            pos += 1
        return pos

    def decode(pos: int):
        try:
            return _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            if "\n" not in text[exc.pos:].rstrip():
                # the text runs out within the value's last line: name the line it starts on
                raise MalformedInput(path, line_at(pos), f"not valid JSON ({exc.msg} on the file's last line: "
                                                         f"the value starting here is cut off)") from None
            column = exc.pos - (text.rfind("\n", 0, exc.pos) + 1) + 1
            raise MalformedInput(path, line_at(exc.pos), f"not valid JSON ({exc.msg}, column {column}); a "
                                                         f"truncated line?") from None

    at = skip_space(at)
    while at < end:
        if text[at] == "[":
            # an array of records: each element is a value of its own, with its own line
            at = skip_space(at + 1)
            if at < end and text[at] == "]":
                at = skip_space(at + 1)
                continue
            while True:
                start = at
                value, at = decode(at)
                yield line_at(start), value
                at = skip_space(at)
                if at < end and text[at] == ",":
                    at = skip_space(at + 1)
                    continue
                if at < end and text[at] == "]":
                    at = skip_space(at + 1)
                    break
                raise MalformedInput(path, line_at(min(at, end)), "not valid JSON (an array not closed by "
                                                                  "']'); a truncated file?")
            continue
        start = at
        value, at = decode(at)
        yield line_at(start), value
        at = skip_space(at)


def read_json_values(path: Path, sse: bool = False) -> Iterator[tuple[int, object]]:
    """(line number, value) of every JSON value of a file, whatever its form (``json_values``).

    With ``sse``, a file with server-sent-event ``data:`` lines is read line by line
    (``read_jsonl``)."""
    with open_input(path, binary=True) as fh:
        raw = fh.read()
    if sse and _SSE_DATA.search(raw):
        yield from read_jsonl(path, sse=True)
        return
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedInput(path, raw.count(b"\n", 0, exc.start) + 1, "not valid JSON (not UTF-8 text)") \
            from None
    yield from json_values(text, path)


def read_jsonl(path: Path, sse: bool = False) -> Iterator[tuple[int, object]]:
    """(line number, parsed value) for every non-blank line; a line that isn't JSON is malformed.

    With ``sse``, server-sent-event captures (``curl -N``, a proxy's log) are read
    too, alone or mixed with JSON lines: a ``data:`` line gives ``{"data": value}``,
    the value parsed as JSON or the text ``[DONE]``, which is what a proxy that
    wraps each body writes. An event's data continued over several ``data:``
    lines is joined (SSE joins them with a newline); ``event:``, ``id:``,
    ``retry:`` and ``:`` comment lines are framing and give nothing.
    """
    fh = open_input(path, binary=True)

    def malformed(lineno: int, exc: Exception) -> MalformedInput:
        reason = (f"{exc.msg.rstrip(': ')}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError)
                  else "not UTF-8 text")
        return MalformedInput(path, lineno, f"not valid JSON ({reason}); a truncated line?")

    pending: list[str] = []     # the data lines of an SSE event not yet valid JSON
    first = 0                   # the line the pending event starts on
    with fh:
        for lineno, raw in enumerate(fh, start=1):
            if not sse:
                if not raw.strip():
                    continue
                try:
                    yield lineno, json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    raise malformed(lineno, exc) from None
                continue
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise malformed(lineno, exc) from None
            if text.startswith("data:"):
                value = text[5:][1:] if text[5:6] == " " else text[5:]
                if not pending and value.strip() == "[DONE]":
                    yield lineno, {"data": "[DONE]"}
                    continue
                pending.append(value)
                first = first if len(pending) > 1 else lineno
                try:
                    parsed = json.loads("\n".join(pending))
                except json.JSONDecodeError:
                    continue        # maybe continued on the next data: line
                pending = []
                yield first, {"data": parsed}
                continue
            if text.startswith(":") or re.match(r"(event|id|retry)(:|$)", text):
                continue            # comments and the other SSE fields don't end an event
            if pending:             # the event ended (blank line or other text) without valid JSON
                try:
                    json.loads("\n".join(pending))
                except json.JSONDecodeError as exc:
                    raise malformed(first, exc) from None
            if not text.strip():
                continue
            try:
                yield lineno, json.loads(text)
            except json.JSONDecodeError as exc:
                raise malformed(lineno, exc) from None
        if pending:
            try:
                json.loads("\n".join(pending))
            except json.JSONDecodeError as exc:
                raise malformed(first, exc) from None


# --------------------------------------------------------------------------- rounds


STOP_REASON = {"stop": "eos", "length": "length", "abort": "abort", "error": "abort"}


@dataclass
class Reconciled:
    """A request's rounds as (drafted, accepted, committed), after reconciliation with usage."""

    rounds: list[tuple[int, int, int]]
    plain_appended: int = 0
    truncated_by: int = 0
    error: str | None = None


def reconcile(steps: list[tuple[int, int]], completion_tokens: int) -> Reconciled:
    """Commit accepted + 1 per speculative step, then make Σ committed = completion_tokens − 1.

    Short: plain decode rounds (0 drafts, 1 token) are appended. Over: the last
    round is truncated. A last round that would commit nothing can't absorb the
    excess, and the request gets no rounds.
    """
    target = max(completion_tokens - 1, 0)
    rounds = [(d, a, a + 1) for d, a in steps]
    total = sum(c for _, _, c in rounds)
    if total < target:
        plain = target - total
        return Reconciled(rounds + [(0, 0, 1)] * plain, plain_appended=plain)
    if total > target:
        excess = total - target
        if not rounds or rounds[-1][2] - excess < 1:
            return Reconciled([], error="the counts exceed completion_tokens − 1 by more than the last "
                                        "round can have been truncated")
        d, a, c = rounds[-1]
        rounds[-1] = (d, a, c - excess)
        return Reconciled(rounds, truncated_by=excess)
    return Reconciled(rounds)


def rebuild_from_histogram(histogram: list[int], drafts_per_round: int) -> list[tuple[int, int]]:
    """One round per histogram count, ordered by accepted count ascending (a synthetic order)."""
    return [(drafts_per_round, accepted) for accepted, n in enumerate(histogram) for _ in range(n)]


class RoundsBuffer:
    """Rows of the rounds table, column by column."""

    COLUMNS = ("deployment_id", "request_id", "round_idx", "num_draft_tokens", "num_accepted_tokens",
               "num_committed_tokens", "stop_reason")

    def __init__(self):
        self.cols: dict[str, list] = {c: [] for c in self.COLUMNS}
        self.times: list[int] = []  # the request's arrival, for date partitions

    def __len__(self) -> int:
        return len(self.cols["round_idx"])

    def add(self, deployment_id: str, request_id: str, rounds: list[tuple[int, int, int]],
            stop_reason: str | None, arrival_us: int) -> None:
        n = len(rounds)
        if not n:
            return
        self.times.extend([arrival_us] * n)
        c = self.cols
        c["deployment_id"].extend([deployment_id] * n)
        c["request_id"].extend([request_id] * n)
        c["round_idx"].extend(range(n))
        for d, a, k in rounds:
            c["num_draft_tokens"].append(d)
            c["num_accepted_tokens"].append(a)
            c["num_committed_tokens"].append(k)
        c["stop_reason"].extend([None] * (n - 1) + [stop_reason])


# --------------------------------------------------------------------------- deployments


@dataclass
class DeploymentRow:
    """One deployments row. ``weak`` names values that are fallbacks (`unknown`, 0): an
    existing row's value wins over them instead of conflicting."""

    deployment_id: str
    model: str
    method: str
    num_speculative_tokens: int
    weak: frozenset[str] = frozenset()

    def as_dict(self) -> dict:
        return {c: getattr(self, c) for c in DEPLOYMENT_REQUIRED}


def deployment_row(deployment_id: str, overrides: Overrides, *, model: str | None, speculated: bool,
                   num_spec_tokens: int | None) -> DeploymentRow:
    """The docs/importers.md rules: command line, else the source, else `unknown` / 0."""
    weak = set()
    if overrides.model is not None:
        model_value = overrides.model
    elif model:
        model_value = model
    else:
        model_value, _ = "unknown", weak.add("model")
    if overrides.method is not None:
        method = overrides.method
    elif not speculated:
        method = "none"
    else:
        method, _ = "unknown", weak.add("method")
    if overrides.num_speculative_tokens is not None:
        gamma = overrides.num_speculative_tokens
    elif method == "none":
        gamma = 0
    elif num_spec_tokens is not None:
        gamma = num_spec_tokens
    else:
        gamma, _ = 0, weak.add("num_speculative_tokens")
    return DeploymentRow(deployment_id, model_value, method, gamma, frozenset(weak))


# --------------------------------------------------------------------------- writer

# Tables whose folders tell how a trace directory is partitioned.
LAYOUT_TABLES = ("deployments", "requests", "steps", "rounds", "intervals", "import_notes")


def _schema_columns(table: str) -> dict[str, str]:
    # one seam for the declared columns: tests widen a schema here (the accept-rate proposal)
    return declared_types(table)


def arrow_schema(table: str, columns: Iterable[str]) -> pa.Schema:
    if table == "import_notes":
        return IMPORT_NOTES_SCHEMA
    return _arrow_schema(table, list(columns), declared=_schema_columns(table))


def _table_files(out: Path, table: str) -> list[Path]:
    single = out / f"{table}.parquet"
    if single.is_file():
        return [single]
    folder = out / table
    return sorted(p for p in folder.rglob("*.parquet") if p.is_file()) if folder.is_dir() else []


def _partitions(path: Path, root: Path) -> dict[str, str]:
    # decoded as the loader decodes them (one place: ingest.load.partition_values)
    return partition_values(path.relative_to(root).parts[:-1])


def _utc_text(us: int) -> str:
    return (EPOCH + dt.timedelta(microseconds=us)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _utc_date(us: int) -> str:
    return (EPOCH + dt.timedelta(microseconds=us)).strftime("%Y-%m-%d")


@dataclass
class _Pending:
    columns: dict[str, list]
    times: list | None          # epoch µs per row, for date partitions; None: a replicated table


class TraceWriter:
    """Collects an import's tables, then writes each as new files under TRACES/<table>/.

    A trace directory whose tables are Hive-partitioned by ``date=`` gets its new
    rows in the date partition of their own time (requests and their rounds by
    arrival_time, intervals by end_time, all UTC), and the deployments row and
    notes in every date partition written: a table's files must agree on their
    partitions, and a nightly run reads one date only. Any other partition key
    can't be derived from the input, and is refused.
    """

    def __init__(self, out: Path, source: str, inputs: Sequence[str | Path] = (), options: str = ""):
        self.out = Path(out)
        self.source = source
        if self.out.exists() and not self.out.is_dir():
            raise ImportConflict(f"{self.out}: --out must be a trace directory, found a file")
        # An import is named by its content (source, options, the bytes of every input), so
        # importing the same input again replaces the earlier import instead of adding to it.
        self.inputs = [Path(p) for p in inputs]
        # Without its inputs (a caller that does not pass them), an import is simply new.
        self.import_id = (import_id(source, options, self.inputs) if self.inputs
                          else uuid.uuid4().hex[:12])
        self.stem = f"import-{source}-{self.import_id}"
        self.options = options
        self.previous = [p for p in self.out.rglob(f"{self.stem}.parquet")] if self.out.is_dir() else []
        self.pending: dict[str, _Pending] = {}
        self.deployment_rows: list[DeploymentRow] = []
        self.fill_in: dict[Path, dict[str, dict]] = {}   # file → deployment id → {column: known value}
        self._existing_dates: dict[str, set] = {}  # deployment id → date partitions holding it (None: flat)
        self._asked: list[DeploymentRow] = []       # the rows as the importer gave them (their weak values)
        self.partition = RUN.get().partition        # None: follow the directory; "date"; "none"
        self.now_us = datetime_us(dt.datetime.now(dt.timezone.utc))
        # rows without a time of their own, in a date-partitioned table, go to the import's own date
        self.untimed_date = _utc_date(self.now_us)

    def _files(self, table: str) -> list[Path]:
        """A table's files, without those of the import this one replaces."""
        return [p for p in _table_files(self.out, table) if p not in self.previous]

    # -- checks before anything is parsed or written

    def check_layout(self, tables: Iterable[str]) -> None:
        for table in tables:
            single = self.out / f"{table}.parquet"
            if single.is_file():
                raise ImportConflict(
                    f"{single}: table {table} is a single file; importers add files under {table}/ and never "
                    f"rewrite one. Move it to {self.out / table / 'part-0.parquet'} first")
            self.partition_keys(table)

    def _keys_of(self, table: str) -> set[str] | None:
        """Partition keys of a table's existing files (or, with none, of the ``key=value`` folders a
        user made for it); None when it has neither."""
        folder = self.out / table
        files = _table_files(self.out, table) if folder.is_dir() else []
        if not files:
            made = {d.name.split("=", 1)[0] for d in folder.iterdir() if d.is_dir() and "=" in d.name} \
                if folder.is_dir() else set()
            return made or None
        keys: set[str] = set()
        for path in files:
            keys |= set(_partitions(path, folder))
        return keys

    def partition_keys(self, table: str) -> tuple[str, ...]:
        """() for flat files, ("date",) for date= partitions; anything else is a conflict.
        ``--partition date`` / ``none`` choose, and are refused where the directory is the other way."""
        keys = self._keys_of(table)
        if keys is None:  # a new table follows the directory
            keys = set()
            for other in LAYOUT_TABLES:
                keys |= self._keys_of(other) or set()
        if keys - {"date"}:
            raise ImportConflict(
                f"{self.out / table}: partitioned by {', '.join(sorted(keys))}; an import can only derive date= "
                f"partitions. Import into an empty directory and move its files into place")
        if self.partition == "none" and keys:
            raise ImportConflict(f"{self.out / table}: already partitioned by date=; --partition none would mix "
                                 f"flat files in (leave --partition out: new files follow the directory)")
        if self.partition == "date":
            flat = [t for t in LAYOUT_TABLES if self._keys_of(t) == set()]
            if flat:
                raise ImportConflict(f"{self.out / flat[0]}: has flat files; --partition date would mix date= "
                                     f"partitions in (leave --partition out: new files follow the directory)")
            return ("date",)
        return tuple(sorted(keys))

    def time_notes(self, summary: ImportSummary) -> None:
        """Say where rows without a time went, and which rows are dated after the import."""
        for table, p in self.pending.items():
            if p.times is None:
                continue
            untimed = sum(1 for t in p.times if t is None)
            if untimed and self.partition_keys(table):
                summary.note(f"{untimed} {table} row{'s' if untimed != 1 else ''} without a time of "
                             f"{'their' if untimed != 1 else 'its'} own written to date={self.untimed_date} "
                             "(the import's date, UTC)")
            future = [t for t in p.times if t is not None and t > self.now_us]
            if future:
                summary.note(f"{len(future)} {table} row{'s' if len(future) != 1 else ''} dated after the import "
                             f"(the latest {_utc_text(max(future))}, imported {_utc_text(self.now_us)}): "
                             "check the input's clock or year")

    # -- deployments

    def existing_deployments(self, deployment_id: str) -> list[dict]:
        rows = []
        for path in self._files("deployments"):
            try:
                names = pq.read_schema(path).names
                have = [c for c in DEPLOYMENT_REQUIRED if c in names]
                if "deployment_id" not in have:
                    continue
                table = pq.read_table(path, columns=have, partitioning=None)
            except (pa.ArrowException, OSError) as exc:
                raise ImportConflict(f"{path}: table deployments: not readable Parquet "
                                     f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
            parts = _partitions(path, self.out / "deployments") if path.parent != self.out else {}
            for row in table.to_pylist():
                if row.get("deployment_id") == deployment_id:
                    rows.append({"_file": path, "_date": parts.get("date"), **row})
        return rows

    def merge_deployment(self, row: DeploymentRow, summary: ImportSummary) -> DeploymentRow:
        """Check ``row`` against the deployments already there and queue it for writing.

        A fallback value (`unknown`, 0) takes the existing row's value; an existing
        unknown value is filled in from this import (the earlier file is rewritten
        with it at commit); any other difference is a conflict. Where an identical
        row already is, none is written.
        """
        existing = self.existing_deployments(row.deployment_id)
        mine = row.as_dict()
        for other in existing:
            for col in DEPLOYMENT_REQUIRED[1:]:
                if col in row.weak and other.get(col) is not None and not _unknown(other, col):
                    mine[col] = other[col]
        for other in existing:
            for col in DEPLOYMENT_REQUIRED[1:]:
                if other.get(col) != mine[col] and _unknown(other, col) and col not in row.weak:
                    self.fill_in.setdefault(other["_file"], {}).setdefault(row.deployment_id, {})[col] = mine[col]
                    summary.note(f"filled in {col} = {mine[col]!r} (it was unknown) in {other['_file']}",
                                 row.deployment_id)
                    other[col] = mine[col]
                if other.get(col) != mine[col]:
                    raise ImportConflict(
                        f"{other['_file']}: deployment {row.deployment_id!r} already exists with {col} = "
                        f"{other.get(col)!r}, this import gives {mine[col]!r}; pass --{col.replace('_', '-')} to "
                        f"match, or import under another --deployment")
        merged = DeploymentRow(**mine)
        self.deployment_rows.append(merged)
        self._asked.append(row)
        self._existing_dates[row.deployment_id] = {o["_date"] for o in existing}
        summary.deployments[row.deployment_id] = ("already present, identical" if existing else "new deployments row")
        return merged

    def refresh_deployments(self, summary: ImportSummary) -> None:
        """Before a deferred commit: the deployments rows that imports committed since this one was
        read wrote (one ``import auto`` of several sources into one deployment)."""
        for asked, row in zip(self._asked, self.deployment_rows):
            existing = self.existing_deployments(row.deployment_id)
            dates = {o["_date"] for o in existing}
            if not existing or dates == self._existing_dates.get(row.deployment_id):
                continue
            mine = row.as_dict()
            for other in existing:
                for col in DEPLOYMENT_REQUIRED[1:]:
                    if other.get(col) == mine[col] or col in asked.weak:
                        continue
                    if not _unknown(other, col):
                        raise ImportConflict(
                            f"{other['_file']}: deployment {row.deployment_id!r} is imported with {col} = "
                            f"{other.get(col)!r} from another file of this import, this one gives {mine[col]!r}; "
                            f"pass --{col.replace('_', '-')} to match, or import them under different deployments")
                    self.fill_in.setdefault(other["_file"], {}).setdefault(row.deployment_id, {})[col] = mine[col]
            self._existing_dates[row.deployment_id] = dates
            summary.deployments[row.deployment_id] = "already present, identical"

    def replaceable(self) -> list[Path]:
        """The existing files a commit may replace: this input's earlier import, the deployments files
        it fills in, its manifest."""
        return [*self.previous, *self.fill_in, self.out / MANIFESTS / f"{self.stem}.json"]

    def existing_request_ids(self, deployment_id: str) -> set[str]:
        found: set[str] = set()
        for path in self._files("requests"):
            try:
                names = pq.read_schema(path).names
                if "deployment_id" not in names or "request_id" not in names:
                    continue
                table = pq.read_table(path, columns=["deployment_id", "request_id"], partitioning=None,
                                      filters=[("deployment_id", "=", deployment_id)])
            except (pa.ArrowException, OSError):
                continue  # the loader reports unreadable files; this check is only a courtesy
            found.update(str(v) for v in table.column("request_id").to_pylist())
        return found

    # -- collecting

    def add(self, table: str, columns: dict[str, list], *, times: list | None = None,
            drop_empty_optional: Iterable[str] = ()) -> None:
        """A table from column lists, typed by its schema. ``times`` (epoch µs per row) place the rows
        in date partitions when the directory has them. Listed optional columns that are all null are
        left out, so a column the source never had stays absent (not defaulted)."""
        drop = {c for c in drop_empty_optional if all(v is None for v in columns[c])}
        kept = {c: v for c, v in columns.items() if c not in drop}
        # the link keys beside the ids they stand for, so the loader need not hash the ids
        kept.update(uid_columns(table, kept))
        self.pending[table] = _Pending(kept, times)

    def add_notes(self, summary: ImportSummary, default_deployment: str | None) -> None:
        notes = summary.persisted_notes()
        if not notes:
            return
        now = datetime_us(dt.datetime.now(dt.timezone.utc))
        self.add("import_notes", {
            "source": [summary.source] * len(notes),
            "deployment_id": [dep if dep is not None else default_deployment for dep, _ in notes],
            "note": [text for _, text in notes],
            "imported_at": [now] * len(notes),
        })

    # -- writing

    def _plan(self) -> list[tuple[str, str | None, pa.Table]]:
        """(table, date partition or None, rows) for every file to write."""
        layout = {t: self.partition_keys(t) for t in set(self.pending) | {"deployments"}}
        dates: set[str] = set()
        for table, p in self.pending.items():
            if p.times is not None and layout[table]:
                dates |= {_utc_date(t) if t is not None else self.untimed_date for t in p.times}
        if not dates:
            dates = {dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")}
        plan = []
        # deployments: a row wherever no identical one is (flat: anywhere; by date: in that date)
        existing = self._existing_dates
        for date in (sorted(dates) if layout["deployments"] else [None]):
            rows = [r for r in self.deployment_rows
                    if (existing.get(r.deployment_id) == set() if date is None
                        else date not in existing.get(r.deployment_id, set()))]
            if rows:
                cols = {c: [getattr(r, c) for r in rows] for c in DEPLOYMENT_REQUIRED}
                plan.append(("deployments", date, _arrow("deployments", cols)))
        for table, p in self.pending.items():
            data = _arrow(table, p.columns)
            if not data.num_rows:
                continue
            if not layout[table]:
                plan.append((table, None, data))
            elif p.times is None:
                plan += [(table, date, data) for date in sorted(dates)]
            else:
                row_dates = pa.array([_utc_date(t) if t is not None else self.untimed_date for t in p.times])
                for date in sorted(set(row_dates.to_pylist())):
                    plan.append((table, date, data.filter(pc.equal(row_dates, date))))
        return plan

    def commit(self, summary: ImportSummary) -> None:
        """Write every file aside, then link each into place. Another import's file is never
        replaced: only this import's own earlier files (the same input imported again), and
        deployments rows whose unknown values this import fills in."""
        self.check_layout(set(self.pending) | ({"deployments"} if self.deployment_rows else set()))
        plan = self._plan()
        written: dict[str, list[str]] = {}
        for table, date, data in plan:
            if table == "deployments":
                for dep in data.column("deployment_id").to_pylist():
                    written.setdefault(dep, []).append(date)
        summary.rows["deployments"] = len(written)
        for dep, dates in written.items():
            if summary.deployments.get(dep, "").startswith("already present"):
                summary.deployments[dep] = ("already present, identical; copied into "
                                            + ", ".join(f"date={d}" for d in dates) + " (each date needs one)")
        for table, p in self.pending.items():
            summary.rows[table] = len(next(iter(p.columns.values()), []))
        staged: list[tuple[str, Path, Path]] = []
        try:
            for table, date, data in plan:
                folder = self.out / table / (f"date={date}" if date is not None else "")
                folder.mkdir(parents=True, exist_ok=True)
                final = folder / f"{self.stem}.parquet"
                tmp = folder / f".{self.stem}.parquet.tmp"
                pq.write_table(data, tmp)
                staged.append((table, tmp, final))
            fills = [(path, _filled(path, changes)) for path, changes in self.fill_in.items()]
            if self.previous:
                summary.note(f"the same input was imported before (import {self.import_id}): "
                             f"its {len(self.previous)} file{'s' if len(self.previous) != 1 else ''} "
                             "are replaced, not added to")
            for table, tmp, final in staged:
                if final in self.previous:
                    os.replace(tmp, final)
                else:
                    _link_new(tmp, final)
                summary.files.setdefault(table, []).append(final)
            for old in self.previous:
                if not any(final == old for _, _, final in staged):
                    old.unlink(missing_ok=True)
            for path, data in fills:
                tmp = path.with_name(f".{path.name}.fill")
                pq.write_table(data, tmp)
                os.replace(tmp, path)
            self._write_manifest(summary)
        finally:
            for _, tmp, _ in staged:
                tmp.unlink(missing_ok=True)

    def _write_manifest(self, summary: ImportSummary) -> None:
        """TRACES/_imports/<stem>.json: what this import read and wrote (`specan import --list`)."""
        folder = self.out / MANIFESTS
        folder.mkdir(parents=True, exist_ok=True)
        manifest = {
            "id": self.import_id, "source": self.source, "options": self.options,
            "imported_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds"),
            "inputs": [{"path": str(p), "sha256": _sha256(p)} for p in self.inputs],
            "rows": dict(summary.rows),
            "files": sorted(str(f.relative_to(self.out)) for fs in summary.files.values() for f in fs),
        }
        tmp = folder / f".{self.stem}.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, folder / f"{self.stem}.json")


MANIFESTS = "_imports"


def _unknown(row: dict, column: str) -> bool:
    """A value an importer wrote for lack of one: never a conflict, and filled in by a later import."""
    if column in ("model", "method"):
        return row.get(column) in (None, "unknown")
    if column == "num_speculative_tokens":
        return row.get(column) in (None, 0) and row.get("method") == "unknown"
    return row.get(column) is None


def _filled(path: Path, changes: dict[str, dict]) -> pa.Table:
    """The deployments file at ``path`` with the unknown values of ``changes`` filled in."""
    table = pq.read_table(path, partitioning=None)
    ids = table.column("deployment_id").to_pylist()
    for column in {c for cols in changes.values() for c in cols}:
        values = [changes.get(dep, {}).get(column, v) for dep, v in zip(ids, table.column(column).to_pylist())]
        i = table.schema.get_field_index(column)
        table = table.set_column(i, table.schema.field(i), pa.array(values, type=table.schema.field(i).type))
    return table


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def import_id(source: str, options: str, inputs: Sequence[Path]) -> str:
    """12 hex digits naming an import by its content: the source, its options, every input's bytes."""
    digest = hashlib.sha256(f"{source}\n{options}\n".encode())
    for path in inputs:
        try:
            digest.update(_sha256(path).encode())
        except OSError:
            digest.update(str(path).encode())    # unreadable: the importer reports it
    return digest.hexdigest()[:12]


def list_imports(out: str | Path) -> list[dict]:
    """Every import recorded in TRACES, oldest first."""
    if not Path(out).is_dir():
        raise ImportInputError(f"{out}: no such trace directory")
    folder = Path(out) / MANIFESTS
    found = []
    for path in sorted(folder.glob("import-*.json")) if folder.is_dir() else []:
        try:
            found.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise ImportInputError(f"{path}: not a readable import manifest ({exc})") from None
    return sorted(found, key=lambda m: (m.get("imported_at", ""), m.get("id", "")))


def remove_import(out: str | Path, wanted: str) -> dict:
    """Take one import back: delete the files it wrote and its manifest."""
    out = Path(out)
    matches = [m for m in list_imports(out) if m["id"].startswith(wanted)] if wanted else []
    if len(matches) != 1:
        known = ", ".join(m["id"] for m in list_imports(out)) or "none"
        raise ImportInputError(f"{out}: {'no' if not matches else 'more than one'} import matches {wanted!r} "
                               f"(imports: {known})")
    manifest = matches[0]
    for rel in manifest["files"]:
        (out / rel).unlink(missing_ok=True)
    (out / MANIFESTS / f"import-{manifest['source']}-{manifest['id']}.json").unlink(missing_ok=True)
    return manifest


def _arrow(table: str, columns: dict[str, list]) -> pa.Table:
    schema = arrow_schema(table, columns)
    return pa.table({c: pa.array(columns[c], type=schema.field(c).type) for c in columns}, schema=schema)


def _link_new(tmp: Path, final: Path) -> None:
    """Put tmp at final, failing if final exists: never replace a file."""
    try:
        os.link(tmp, final)
    except FileExistsError:
        raise ImportConflict(f"{final}: already exists; an import never overwrites a file") from None
    except OSError:
        if final.exists():
            raise ImportConflict(f"{final}: already exists; an import never overwrites a file") from None
        os.rename(tmp, final)


def finish(writer: TraceWriter, summary: ImportSummary, default_deployment: str | None) -> ImportSummary:
    writer.check_layout(set(writer.pending) | {"deployments"})
    writer.time_notes(summary)
    writer.add_notes(summary, default_deployment)
    deferred = RUN.get().deferred
    if deferred is not None:
        deferred.append((writer, summary))     # committed by commit_all, after every input is read
        return summary
    writer.commit(summary)
    return summary


def commit_all(pending: list[tuple[TraceWriter, ImportSummary]]) -> None:
    """Commit imports that were read and checked (``finish`` under ``ImportRun.deferred``), all or
    nothing: when one commit fails, every file written is removed and every file replaced is put
    back, so the trace directory is as it was."""
    if not pending:
        return
    out = pending[0][0].out
    before = set(out.rglob("*")) if out.is_dir() else set()
    existed = out.is_dir()
    backup = out / f".specan-rollback-{uuid.uuid4().hex[:8]}"
    kept: list[tuple[Path, Path]] = []
    try:
        # the files a commit may replace (an earlier import of the same input, a filled-in
        # deployments row, a manifest): kept by a hard link, which a replace leaves intact
        for path in sorted({p for writer, _ in pending for p in writer.replaceable() if p.is_file()}):
            backup.mkdir(exist_ok=True)
            copy = backup / f"{len(kept)}"
            try:
                os.link(path, copy)
            except OSError:
                shutil.copy2(path, copy)
            kept.append((path, copy))
        try:
            for writer, summary in pending:
                writer.refresh_deployments(summary)
                writer.commit(summary)
        except BaseException:
            for path, copy in kept:
                if not path.exists() or not os.path.samefile(path, copy):
                    os.replace(copy, path)
            shutil.rmtree(backup, ignore_errors=True)
            after = set(out.rglob("*")) if out.is_dir() else set()
            for path in sorted(after - before, key=lambda p: len(p.parts), reverse=True):
                if path.is_dir() and not path.is_symlink():
                    with contextlib.suppress(OSError):
                        path.rmdir()
                else:
                    path.unlink(missing_ok=True)
            if not existed and out.is_dir():
                with contextlib.suppress(OSError):
                    out.rmdir()
            raise
    finally:
        if backup.exists():
            shutil.rmtree(backup, ignore_errors=True)
