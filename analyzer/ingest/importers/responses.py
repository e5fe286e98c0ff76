"""What the two response importers (vLLM, SGLang) share: typed field access that
names the file and line, the wrapper keys, and the requests rows."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from collections.abc import Iterator, Sequence

from .common import (ImportInputError, ImportSummary, MalformedInput, Overrides, RoundsBuffer, TraceWriter,
                     deployment_row, finish, is_int, is_number, parse_time, read_json_values, reconcile)

# Wrapper keys that fill a requests column of the same name, and the JSON kind each takes.
WRAPPER_COLUMNS = {
    "category": "string",
    "structured_output": "boolean",
    "temperature": "number",
    "num_preemptions": "integer",
    "prompt_token_ids": "integer list",
    "output_token_ids": "integer list",
    "quality_score": "number",
    "matches_reference": "boolean",
}

REQUEST_COLUMNS = ("deployment_id", "request_id", "category", "arrival_time", "first_token_time", "finish_time",
                   "prompt_tokens", "output_tokens", "finish_reason", "structured_output", "temperature",
                   "num_preemptions", "prompt_token_ids", "output_token_ids", "quality_score", "matches_reference")
OPTIONAL_REQUEST_COLUMNS = ("category", "first_token_time", "finish_time", "structured_output", "temperature",
                            "num_preemptions", "prompt_token_ids", "output_token_ids", "quality_score",
                            "matches_reference")

# OpenAI-style finish_reason → requests.finish_reason (docs/trace-format.md).
FINISH_REASON = {"stop": "stop", "eos": "stop", "tool_calls": "stop", "function_call": "stop",
                 "length": "length", "abort": "abort", "error": "error"}


@dataclass
class Where:
    path: Path
    line: int

    def fail(self, problem: str) -> MalformedInput:
        return MalformedInput(self.path, self.line, problem)


def _kind_ok(value, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return is_int(value)
    if kind == "number":
        return is_number(value)
    if kind == "object":
        return isinstance(value, dict)
    if kind == "list":
        return isinstance(value, list)
    if kind == "integer list":
        return isinstance(value, list) and all(is_int(v) for v in value)
    raise ValueError(kind)


def get(obj: dict, key: str, kind: str, where: Where, label: str | None = None):
    """obj[key] when present and not null, checked to be of ``kind``; None when absent or null."""
    value = obj.get(key)
    if value is None:
        return None
    if not _kind_ok(value, kind):
        raise where.fail(f"{label or key}: expected {'an' if kind[0] in 'aeiou' else 'a'} {kind}, "
                         f"found {type(value).__name__} {_short(value)}")
    return value


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def unwrap(obj, where: Where) -> tuple[dict | None, dict | None]:
    """(wrapper, response) of one input value: a bare response (no wrapper), or a wrapper
    ``{"response": ..., ...}``. A wrapper whose response is null gives (wrapper, None):
    the caller skips it."""
    if not isinstance(obj, dict):
        raise where.fail(f"expected a JSON object (a response or a wrapper), found {type(obj).__name__}")
    if "response" not in obj:
        return None, obj
    return obj, get(obj, "response", "object", where)


def wrapper_values(wrapper: dict, where: Where) -> dict:
    return {col: get(wrapper, col, kind, where) for col, kind in WRAPPER_COLUMNS.items()}


def arrival_from(wrapper: dict | None, created, where: Where) -> tuple[int | None, str | None]:
    """(epoch µs, which field) from the wrapper's sent_at, else created."""
    if wrapper is not None and wrapper.get("sent_at") is not None:
        us = parse_time(wrapper["sent_at"])
        if us is None:
            raise where.fail(f"sent_at: expected ISO-8601 text or epoch seconds, found {_short(wrapper['sent_at'])}")
        return us, "sent_at"
    if created is not None:
        us = parse_time(created)
        if us is None:
            raise where.fail(f"created: expected epoch seconds, found {_short(created)}")
        return us, "created"
    return None, None


@dataclass
class RequestsBuffer:
    cols: dict[str, list] = field(default_factory=lambda: {c: [] for c in REQUEST_COLUMNS})
    ids: set = field(default_factory=set)

    def __len__(self) -> int:
        return len(self.cols["request_id"])

    def add(self, **row) -> None:
        for c in REQUEST_COLUMNS:
            self.cols[c].append(row.get(c))
        self.ids.add(row["request_id"])


NOT_REBUILT = "requests without rounds: "


def add_reconciled_rounds(rounds: RoundsBuffer, tally: "Tally", summary: ImportSummary, deployment_id: str,
                          request_id: str, steps: list[tuple[int, int]], completion: int, speculated: bool,
                          stop_reason: str, arrival: int) -> None:
    """A request's rounds, reconciled with its completion tokens (common.reconcile), counted in
    ``tally`` where plain rounds were appended or the last one truncated; skipped when they can't be."""
    fixed = reconcile(steps, completion)
    if fixed.error:
        summary.skip(NOT_REBUILT + fixed.error)
        return
    if speculated and fixed.plain_appended:
        tally.short[request_id] = fixed.plain_appended
    if fixed.truncated_by:
        tally.over[request_id] = fixed.truncated_by
    rounds.add(deployment_id, request_id, fixed.rounds, stop_reason, arrival)


@dataclass
class Tally:
    """Counts behind an import's notes."""

    def reconciliation_notes(self, histogram_name: str) -> list[str]:
        """Notes on rounds that had to be fitted to usage.completion_tokens or rebuilt from a histogram."""
        notes = []
        if self.short:
            notes.append(f"{len(self.short)} request{_s(len(self.short))}: counts fell short of completion_tokens"
                         f" − 1; {sum(self.short.values())} plain rounds appended after the speculative ones, "
                         "their true position is unknown")
        if self.over:
            truncated = sum(self.over.values())
            notes.append(f"{len(self.over)} request{_s(len(self.over))}: counts ran over completion_tokens − 1; "
                         f"the last round was truncated by {truncated} token{_s(truncated)} in all, its "
                         "stop_reason from finish_reason")
        if self.rebuilt:
            notes.append(f"rounds of {self.rebuilt} request{_s(self.rebuilt)} rebuilt from {histogram_name}: "
                         "order is synthetic (ascending accepted count)")
        return notes

    short: Counter = field(default_factory=Counter)     # requests → plain rounds appended
    over: Counter = field(default_factory=Counter)      # requests → tokens truncated
    rebuilt: int = 0
    plain_requests: int = 0
    spec_requests: int = 0
    no_timing: int = 0
    from_created: int = 0
    already_present: int = 0
    streams: int = 0            # requests assembled from streamed chunks
    per_choice_spec: int = 0    # speculative counts read from choices[0].speculative_decoding_stats


def _s(n: int) -> str:
    return "" if n == 1 else "s"


class ResponseImport:
    """What both response importers fill, from the first line read to the files written."""

    def __init__(self, source: str, out: str | Path, deployment_id: str, files: Sequence[str | Path] = (),
                 options: str = ""):
        self.deployment_id = deployment_id
        self.writer = TraceWriter(Path(out), source, files, options=options)
        self.writer.check_layout(("requests", "rounds", "import_notes"))
        self.summary = ImportSummary(source, Path(out))
        self.requests, self.rounds, self.tally = RequestsBuffer(), RoundsBuffer(), Tally()
        self.models: Counter = Counter()
        self.existing = self.writer.existing_request_ids(deployment_id)

    @staticmethod
    def records(files: Sequence[str | Path], sse: bool = False) -> Iterator[tuple[Where, object]]:
        """Every JSON value of every file (one per line, one per file, pretty-printed, or an array's
        elements: common.read_json_values), with where it came from; with ``sse``, also every
        server-sent event's data, as ``{"data": value}`` (common.read_jsonl)."""
        for path in files:
            for lineno, obj in read_json_values(Path(path), sse=sse):
                yield Where(Path(path), lineno), obj

    def located(self, records: Iterator[tuple[Where, object]]) -> Iterator[tuple[Where, object]]:
        """The records, each recorded as the summary's current place, so a skip names its line."""
        for where, obj in records:
            self.summary.at = f"{where.path}:{where.line}"
            yield where, obj
        self.summary.at = None

    def write(self, overrides: Overrides, num_spec_tokens: int | None) -> ImportSummary:
        """The deployments row, then the requests and rounds files; returns the summary."""
        if not self.requests.ids:
            skipped = ", ".join(f"{n} {reason}" + (f" (first at {self.summary.places[reason][0]})"
                                                   if self.summary.places.get(reason) else "")
                                for reason, n in self.summary.skipped.most_common())
            raise ImportInputError(f"{', '.join(str(p) for p in self.writer.inputs) or self.writer.out}: nothing to "
                                   f"import: no request became a trace row"
                                   + (f" ({skipped})" if skipped else " (no records)"))
        model = self.models.most_common(1)[0][0] if self.models else None
        row = deployment_row(self.deployment_id, overrides, model=model,
                             speculated=self.tally.spec_requests > 0, num_spec_tokens=num_spec_tokens)
        self.writer.merge_deployment(row, self.summary)
        self.writer.add("requests", self.requests.cols, times=self.requests.cols["arrival_time"],
                        drop_empty_optional=OPTIONAL_REQUEST_COLUMNS)
        self.writer.add("rounds", self.rounds.cols, times=self.rounds.times)
        return finish(self.writer, self.summary, self.deployment_id)

