"""`specan import prometheus`: speculative-decoding counters from Prometheus → intervals.

Two inputs, told apart by content (a file whose first character is ``{`` is JSON):

1. The JSON body of ``/api/v1/query_range`` (``resultType: matrix``), in any JSON form.
2. The text exposition format: what ``curl /metrics`` returns, Prometheus text
   or OpenMetrics (``# EOF``), one snapshot per file or several concatenated.
   It is parsed with ``prometheus_client``'s own parsers. A sample's time is its
   own timestamp when it has one, else an ISO-8601 time in the file name
   (``metrics-2026-11-28T12:00:30Z.txt``), else ``--time``, else the file's
   modification time (what ``curl -o`` leaves), noted. Several snapshots
   concatenated in one file need sample timestamps.

Both become the same per-label-group sample series, and the same code makes the
intervals. Counters read (the ``_total`` suffix is optional)::

    vllm:spec_decode_num_drafts_total                      (vLLM V1; llamacpp: the same)
    vllm:spec_decode_num_draft_tokens_total
    vllm:spec_decode_num_accepted_tokens_total
    vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0".."k-1"}

TensorRT-LLM's ``trtllm_spec_decode_num_draft_tokens_total`` and ``…_num_accepted_tokens_total``
are read the same way (it counts no drafts and no positions).

``*_created`` series are counter creation times, not counts: a label group with a
single sample time makes one interval from them (the engine's start) to the scrape.

Series are grouped by their labels other than ``__name__`` and ``position``
(``model_name``, ``engine``, ``instance``, …); ``--deployment`` maps each group
to a deployment id, either one id for every group or ``label=value:ID`` pairs.
Each group is one **series** of the intervals table (named by its labels), and
each pair of consecutive samples of a group makes one interval holding the
counter deltas.

A counter that decreases was reset by a restart: its new value is the delta.
A restart resets every counter of the process, including one that has already
climbed back above its old value by the next sample, so when any counter of a
group decreases over an interval, all of that group's counters take their new
value as the delta for that interval.

Recognised but not turned into counts:

- vLLM V0 (``vllm:spec_decode_num_emitted_tokens_total``, the gauges
  ``vllm:spec_decode_draft_acceptance_rate`` and ``vllm:spec_decode_efficiency``):
  V0 incremented its Prometheus counters by its cumulative totals at every log
  interval (a sum of sums, vllm-project/vllm#15415, closed unmerged), so the
  difference of two samples is not the tokens of the interval.
- SGLang's ``sglang:spec_accept_length`` gauge: a level (committed tokens per
  verify step over SGLang's last decode log interval), never differenced. It is
  kept as ``reported_accept_length`` on the intervals of a label group that also
  has counters; SGLang itself exports no spec-decode counters.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .common import (ImportConflict, ImportInputError, ImportSummary, MalformedInput, Overrides, TraceWriter,
                     datetime_us, deployment_row, epoch_us, finish, json_values, parse_time)
from .vllm_log import INTERVAL_COLUMNS

SOURCE = "prometheus"
INTERVAL_SOURCE = "prometheus"

OTHER_SERIES = "series of another metric"
OTHER_SAMPLE = "sample of another metric"
CREATED = "`_created` sample (a counter's creation time, not a count)"
V0_SKIPPED = "vLLM V0 spec-decode sample (sums of cumulative totals: not interval counts)"
RATE_GAUGE = "SGLang sglang:spec_accept_rate gauge (no column for it)"

REPORTED_COLUMNS = ("reported_accept_length", "reported_accept_length_definition")
SGLANG_DEFINITION = ("SGLang's sglang:spec_accept_length gauge at the interval's end: committed tokens per verify "
                     "step (accepted drafts + 1) over SGLang's last decode log interval, as reported")

EXPECTED = ("vLLM's vllm:spec_decode_num_drafts, num_draft_tokens, num_accepted_tokens[_per_pos] counters "
            "(with or without _total), llama.cpp's llamacpp:spec_decode_* counters of the same names, "
            "TensorRT-LLM's trtllm_spec_decode_num_draft_tokens / num_accepted_tokens counters, or "
            "SGLang's sglang:spec_accept_length gauge")

_COUNTER = re.compile(r"^(?:(?P<engine>vllm|llamacpp):|(?P<trtllm>trtllm)_)spec_decode_(?P<counter>num_drafts|"
                      r"num_draft_tokens|num_accepted_tokens|num_accepted_tokens_per_pos)(?:_total)?$")
_CREATED = re.compile(r"^(?P<counter>(?:vllm:|llamacpp:|trtllm_)spec_decode_\w+)_created$")
# TensorRT-LLM's gauges: levels of its last iteration stats (tensorrt_llm/metrics/collector.py)
_TRTLLM_GAUGE = re.compile(r"^trtllm_spec_decode_(?:acceptance_length|draft_overhead)$")
TRTLLM_GAUGE = ("TensorRT-LLM trtllm_spec_decode_acceptance_length / draft_overhead gauge (a level of its last "
                "iteration, no column for it)")
_V0 = re.compile(r"^vllm:spec_decode_(?:num_emitted_tokens(?:_total)?|draft_acceptance_rate|efficiency)$")
_ACCEPT_LENGTH_GAUGE = "sglang:spec_accept_length"
_RATE_GAUGE = "sglang:spec_accept_rate"
_PAIR = re.compile(r"^(?P<label>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*):(?P<id>[^:]+)$")
# An ISO-8601 date and time in a file name: 2026-11-28T12:00:30Z, 2026-11-28T12-00-30Z, 20261128T120030Z, …
_NAME_TIME = re.compile(r"(?<!\d)(\d{4})-?(\d{2})-?(\d{2})T(\d{2})[:_-]?(\d{2})[:_-]?(\d{2})(?:[.,](\d{1,9}))?"
                        r"(Z|[+-]\d{2}(?::?\d{2})?)?(?!\d)", re.IGNORECASE)
_EOF = re.compile(r"^# EOF[ \t]*\r?$", re.MULTILINE)

GroupKey = tuple[tuple[str, str], ...]


@dataclass
class DeploymentMap:
    """``--deployment``: one id for every label group, or ``label=value:ID`` pairs."""

    single: str | None = None
    pairs: list[tuple[str, str, str]] = field(default_factory=list)

    @classmethod
    def parse(cls, values: Sequence[str] | str) -> DeploymentMap:
        values = [values] if isinstance(values, str) else list(values)
        pairs: list[tuple[str, str, str]] = []
        singles: list[str] = []
        for value in values:
            pieces = value.split(",")
            if all(_PAIR.match(p.strip()) for p in pieces):
                pairs += [(m["label"], m["value"], m["id"]) for m in (_PAIR.match(p.strip()) for p in pieces)]
            elif "=" in value:
                raise ImportInputError(f"--deployment {value!r}: expected one id, or label=value:ID pairs")
            else:
                singles.append(value)
        if singles and (pairs or len(singles) > 1):
            raise ImportInputError("--deployment: give one id, or only label=value:ID pairs")
        if not singles and not pairs:
            raise ImportInputError("--deployment: no deployment id given")
        return cls(single=singles[0] if singles else None, pairs=pairs)

    def lookup(self, labels: dict[str, str]) -> str | None:
        if self.single is not None:
            return self.single
        hits = {dep for label, value, dep in self.pairs if labels.get(label) == value}
        if len(hits) > 1:
            raise ImportConflict(f"--deployment: the label group {_describe(labels)} matches pairs of "
                                 f"several deployments ({', '.join(sorted(hits))})")
        return hits.pop() if hits else None

    def check_matches(self, keys: Sequence[GroupKey]) -> None:
        """Every ``label=value`` pair must select a label group: else exit 2, naming the values present."""
        for label, value, dep in self.pairs:
            if any(dict(key).get(label) == value for key in keys):
                continue
            values = sorted({dict(key)[label] for key in keys if label in dict(key)})
            if values:
                present = f"{label} values present: " + ", ".join(json.dumps(v) for v in values)
            else:
                labels = sorted({name for key in keys for name, _ in key})
                present = (f"no series has a {label} label; labels present: {', '.join(labels)}" if labels
                           else "the series have no labels; give one deployment id")
            raise ImportInputError(f"--deployment {label}={value}:{dep}: matches no spec-decode series ({present})")

    @property
    def ids(self) -> list[str]:
        return [self.single] if self.single is not None else list(dict.fromkeys(d for _, _, d in self.pairs))


def _describe(labels: dict[str, str] | GroupKey) -> str:
    items = labels.items() if isinstance(labels, dict) else labels
    return "{" + ", ".join(f'{k}="{v}"' for k, v in items) + "}"


def series_name(key: GroupKey) -> str | None:
    """The intervals.series of a label group: its labels, sorted, ``engine=0,model_name=m``; None without labels."""
    return ",".join(f"{k}={v}" for k, v in key) or None


def _line_of(text: str, needle: str, nth: int = 0) -> int:
    """1-based line of the nth occurrence of needle (1 when not found)."""
    at = -1
    for _ in range(nth + 1):
        at = text.find(needle, at + 1)
        if at < 0:
            return 1
    return text.count("\n", 0, at) + 1


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ImportInputError(f"{path}: can't read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise MalformedInput(path, 1, "not UTF-8 text; expected a Prometheus query_range JSON body or a /metrics "
                                      "scrape") from None


def _is_json(text: str) -> bool:
    return text.lstrip("\ufeff \t\r\n")[:1] in ("{", "[")


def _read_body(path: Path, text: str) -> list[dict]:
    """The series of every query_range body in the file (one body, pretty-printed or not, or several,
    one per line: common.json_values)."""
    result: list[dict] = []
    for line, body in json_values(text, path):
        result += _body_series(path, text, line, body, len(result))
    return result


def _body_series(path: Path, text: str, line: int, body, before: int) -> list[dict]:
    """The series of one query_range body that starts on ``line``; ``before`` series came earlier."""
    if not isinstance(body, dict):
        raise MalformedInput(path, line, "expected a Prometheus query_range body (a JSON object with data.result)")
    if body.get("status") == "error":
        raise MalformedInput(path, _line_of(text, '"error"'),
                             f"the query failed: {body.get('errorType', '')} {body.get('error', '')}".strip())
    data = body.get("data")
    if not isinstance(data, dict):
        raise MalformedInput(path, line, "expected a Prometheus query_range body: no data object")
    kind = data.get("resultType")
    if kind != "matrix":
        raise MalformedInput(path, _line_of(text, '"resultType"'),
                             f"expected resultType \"matrix\" (a range query), found {json.dumps(kind)}")
    result = data.get("result")
    if not isinstance(result, list):
        raise MalformedInput(path, _line_of(text, '"result"'), "data.result: expected a list of series")
    for i, series in enumerate(result):
        at = _line_of(text, '"metric"', before + i)
        if not isinstance(series, dict) or not isinstance(series.get("metric"), dict) \
                or not isinstance(series.get("values"), list):
            raise MalformedInput(path, at, f"series {i}: expected {{\"metric\": {{...}}, \"values\": [...]}}")
        for sample in series["values"]:
            if not (isinstance(sample, list) and len(sample) == 2 and isinstance(sample[0], (int, float))
                    and not isinstance(sample[0], bool) and isinstance(sample[1], str)):
                raise MalformedInput(path, at, f"series {i}: a sample is not [unix time, \"value\"]: "
                                               f"{json.dumps(sample)[:60]}")
        series["_line"] = at
    return result


# --------------------------------------------------------------------------- text exposition


_PARSE_ERRORS = (ValueError, IndexError, KeyError, TypeError)


def _bad_line(chunk: str) -> int:
    """0-based line of ``chunk`` that the Prometheus text parser refuses on its own (0 when none does)."""
    from prometheus_client.parser import text_string_to_metric_families

    for i, line in enumerate(chunk.splitlines()):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            for _ in text_string_to_metric_families(line + "\n"):
                pass
        except _PARSE_ERRORS:
            return i
    return 0


def _exposition(path: Path, text: str) -> Iterator[tuple[int, object]]:
    """(exposition index, sample) of every sample, in file order, by prometheus_client's parsers.

    OpenMetrics (a file with ``# EOF`` lines) is split after each ``# EOF``, one exposition each;
    Prometheus text has no terminator and is parsed as one."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
    from prometheus_client.parser import text_string_to_metric_families as prometheus_text

    ends = [m.end() for m in _EOF.finditer(text)]
    if ends:
        starts = [0] + [e + 1 for e in ends]
        chunks = [(starts[i], text[starts[i]:min(ends[i] + 1, len(text))]) for i in range(len(ends))]
        if text[starts[-1]:].strip():
            chunks.append((starts[-1], text[starts[-1]:]))
        parse, fmt = openmetrics, "OpenMetrics"
    else:
        chunks, parse, fmt = [(0, text)], prometheus_text, "Prometheus text format"
    for index, (offset, chunk) in enumerate(chunks):
        try:
            for family in parse(chunk):
                for sample in family.samples:
                    yield index, sample
        except _PARSE_ERRORS as exc:
            first = text.count("\n", 0, offset) + 1
            message = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
            if "Missing # EOF" in message:
                message += " (a truncated scrape?)"
            raise MalformedInput(path, first + _bad_line(chunk), f"not the {fmt} ({message}); expected a /metrics "
                                                                 f"scrape or a Prometheus query_range JSON body") \
                from None


def _sample_us(timestamp) -> int | None:
    """A parsed sample timestamp (float seconds, or OpenMetrics' Timestamp) → epoch µs."""
    if timestamp is None:
        return None
    if hasattr(timestamp, "sec") and hasattr(timestamp, "nsec"):
        return timestamp.sec * 1_000_000 + (timestamp.nsec + 500) // 1000
    value = float(timestamp)
    return epoch_us(value) if math.isfinite(value) else None


def name_time(path: Path) -> tuple[int, bool] | None:
    """(epoch µs, had a zone) of the ISO-8601 time in a file's name; None when it has none."""
    found = {m.group(0): m for m in _NAME_TIME.finditer(path.name)}
    if not found:
        return None
    if len(found) > 1:
        raise ImportInputError(f"{path}: the file name holds several times ({', '.join(found)}); expected one")
    m = next(iter(found.values()))
    frac = (m[7] or "0")[:6].ljust(6, "0")
    zone = m[8]
    try:
        tz = dt.timezone.utc
        if zone and zone.upper() != "Z":
            digits = zone[1:].replace(":", "")
            delta = dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
            tz = dt.timezone(delta if zone[0] == "+" else -delta)
        when = dt.datetime(int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]), int(m[6]), int(frac), tzinfo=tz)
    except ValueError:
        raise ImportInputError(f"{path}: the time in the file name, {m.group(0)}, is not a real date and time") \
            from None
    return datetime_us(when), zone is not None


def _name_key(path: Path):
    """What a file name contributes to an import (its time, when it holds one)."""
    try:
        found = name_time(path)
    except ImportInputError:
        return path.name
    return found[0] if found else None


def _option_time(value: str | None) -> tuple[int, bool] | None:
    """``--time``: ISO-8601 (UTC when it has no zone) or epoch seconds → (epoch µs, had a zone)."""
    if value is None:
        return None
    us = parse_time(value)
    if us is None:
        raise ImportInputError(f"--time {value!r}: expected an ISO-8601 time such as 2026-11-28T12:00:30Z, "
                               f"or epoch seconds")
    text = value.strip()
    try:
        float(text)
        zoned = True                         # epoch seconds are UTC
    except ValueError:
        zoned = dt.datetime.fromisoformat(text).tzinfo is not None
    return us, zoned


# --------------------------------------------------------------------------- label groups


@dataclass
class Group:
    labels: GroupKey
    # counter → {time µs: value}; counter is "num_drafts", ... or ("pos", i); "accept_length" for the gauge
    samples: dict = field(default_factory=lambda: defaultdict(dict))
    engines: set = field(default_factory=set)       # vllm, llamacpp, trtllm: who exported the counters
    v0: set = field(default_factory=set)            # V0-only metric names seen
    # counter → the epoch µs its `_created` samples give: when it started counting from 0
    created: dict = field(default_factory=lambda: defaultdict(set))

    def counting_since(self) -> int | None:
        """The earliest `_created` time of the group's token counters (their counting starts together
        at the engine's start); None without one."""
        times = [t for c, ts in self.created.items() if c in ("num_draft_tokens", "num_accepted_tokens")
                 for t in ts]
        return min(times) if times else None

    @property
    def has_counts(self) -> bool:
        return bool(self.samples.get("num_draft_tokens")) and "num_accepted_tokens" in self.samples


class _Reader:
    """Classifies samples of either input into label groups."""

    def __init__(self, summary: ImportSummary):
        self.summary = summary
        self.groups: dict[GroupKey, Group] = {}

    def group(self, labels: dict[str, str]) -> Group:
        key = tuple(sorted((k, v) for k, v in labels.items() if k not in ("__name__", "position")))
        return self.groups.setdefault(key, Group(key))

    def kind(self, name: str) -> tuple[str, object] | None:
        """What a metric name is to this importer: (kind, counter) or None for another metric."""
        m = _COUNTER.match(name)
        if m is not None:
            return "counter", (m["engine"] or m["trtllm"], m["counter"])
        if _V0.match(name):
            return "v0", name
        if name == _ACCEPT_LENGTH_GAUGE:
            return "gauge", "accept_length"
        if name == _RATE_GAUGE:
            return "rate", RATE_GAUGE
        if _TRTLLM_GAUGE.match(name):
            return "rate", TRTLLM_GAUGE
        m = _CREATED.match(name)
        if m is not None:
            counted = _COUNTER.match(m["counter"])
            return "created", counted["counter"] if counted is not None else None
        return None

    def add(self, path: Path, line, kind: tuple[str, object], labels: dict[str, str], t_us: int,
            value: float) -> None:
        """One sample; ``line`` is its line number, or a callable that finds it (only for an error)."""
        what, detail = kind
        if what == "rate":
            self.summary.skip(str(detail))
            return
        if not math.isfinite(value):
            self.summary.skip("non-finite sample")
            return
        group = self.group(labels)
        if what == "created":
            # not a count, but when the counter started from 0: the start of a lone scrape's interval
            self.summary.skip(CREATED)
            if detail is not None:
                counter = detail
                if counter == "num_accepted_tokens_per_pos":
                    counter = ("pos", labels.get("position"))
                group.created[counter].add(epoch_us(value))
            return
        if what == "v0":
            group.v0.add(str(detail).removesuffix("_total"))
            return
        counter: object = detail
        if what == "counter":
            engine, counter = detail
            group.engines.add(engine)
            if counter == "num_accepted_tokens_per_pos":
                try:
                    counter = ("pos", int(labels.get("position", "")))
                except ValueError:
                    raise MalformedInput(path, line() if callable(line) else line,
                                         "a per-position series without an integer position label") from None
        group.samples[counter][t_us] = value  # several files: a repeated time is one sample


def _add_json(path: Path, text: str, reader: _Reader) -> int:
    """The series of a query_range body into label groups; the number of spec-decode series."""
    found = 0
    for series in _read_body(path, text):
        labels = {str(k): str(v) for k, v in series["metric"].items()}
        kind = reader.kind(labels.get("__name__", ""))
        if kind is None:
            reader.summary.skip(OTHER_SERIES)
            continue
        found += kind[0] not in ("created",)
        for t, value in series["values"]:
            try:
                v = float(value)
            except ValueError:
                raise MalformedInput(path, series["_line"], f"sample value {value!r} is not a number") from None
            reader.add(path, series["_line"], kind, labels, epoch_us(t), v)
    return found


@dataclass
class _Timing:
    """How the snapshots of text files were timed."""

    option: tuple[int, bool] | None
    by_samples: list[Path] = field(default_factory=list)
    by_name: list[Path] = field(default_factory=list)
    unzoned_names: list[Path] = field(default_factory=list)
    by_option: list[Path] = field(default_factory=list)
    by_mtime: list[tuple[Path, int]] = field(default_factory=list)     # (file, its modification time µs)


def _add_exposition(path: Path, text: str, reader: _Reader, timing: _Timing) -> int:
    """The samples of a /metrics scrape (one or several snapshots) into label groups; the number of
    spec-decode samples."""
    wanted: list[tuple[int, object, tuple]] = []
    for index, sample in _exposition(path, text):
        kind = reader.kind(sample.name)
        if kind is None:
            reader.summary.skip(OTHER_SAMPLE)
            continue
        wanted.append((index, sample, kind))
    found = sum(1 for _, _, kind in wanted if kind[0] != "created")
    untimed = [(i, s) for i, s, kind in wanted if s.timestamp is None and kind[0] not in ("created", "rate")]
    fallback: int | None = None
    if untimed:
        seen: set = set()
        for index, sample in untimed:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            again = key in seen or index != untimed[0][0]
            if again:
                raise ImportInputError(
                    f"{path}: several snapshots in one file without sample timestamps "
                    f"({sample.name}{_describe(sample.labels)} comes again"
                    f"{' after a # EOF' if index != untimed[0][0] else ''}): one time can't date them all; "
                    f"give one snapshot per file, each named with its time, or scrape with timestamps")
            seen.add(key)
        named = name_time(path)
        if named is not None:
            fallback = named[0]
            timing.by_name.append(path)
            if not named[1]:
                timing.unzoned_names.append(path)
        elif timing.option is not None:
            fallback = timing.option[0]
            timing.by_option.append(path)
        else:
            # `curl -o` writes the file as the scrape arrives: its modification time is the scrape's
            try:
                fallback = epoch_us(path.stat().st_mtime)
            except OSError as exc:
                raise ImportInputError(f"{path}: can't read its modification time ({exc.strerror or exc})") \
                    from None
            timing.by_mtime.append((path, fallback))
    if len(untimed) < len([1 for _, _, kind in wanted if kind[0] not in ("created", "rate")]):
        timing.by_samples.append(path)
    for _, sample, kind in wanted:
        t_us = _sample_us(sample.timestamp) if sample.timestamp is not None else fallback
        if kind[0] == "created":
            t_us = t_us or 0            # a creation time is its value; when it was sampled doesn't matter
        if t_us is None:
            reader.summary.skip("sample with a timestamp that is not a number")
            continue
        reader.add(path, lambda name=sample.name: _line_of(text, name), kind, dict(sample.labels), t_us,
                   float(sample.value))
    return found


# --------------------------------------------------------------------------- import


def import_prometheus(files: Sequence[str | Path], out: str | Path, deployment: Sequence[str] | str,
                      overrides: Overrides | None = None, time: str | None = None) -> ImportSummary:
    """Import Prometheus range-query bodies or /metrics scrapes into TRACES ``out`` as intervals.

    ``time`` (``--time``) dates the one scrape that has neither sample timestamps nor a time in its file name."""
    overrides = overrides or Overrides()
    mapping = DeploymentMap.parse(deployment)
    timing = _Timing(_option_time(time))
    # A snapshot's time may come from its file name, so the names' times are part of what is imported.
    ids = [deployment] if isinstance(deployment, str) else list(deployment)
    writer = TraceWriter(Path(out), SOURCE, files, options=f"deployment={','.join(ids)} time={time} "
                                                           f"names={[_name_key(Path(p)) for p in files]} {overrides}")
    writer.check_layout(("intervals", "import_notes"))
    summary = ImportSummary(SOURCE, Path(out), quiet_reasons=frozenset({OTHER_SAMPLE, CREATED}))
    reader = _Reader(summary)

    for path in map(Path, files):
        text = _read_text(path)
        if _is_json(text):
            found = _add_json(path, text, reader)
        else:
            found = _add_exposition(path, text, reader, timing)
        if not found:
            raise ImportInputError(f"{path}: nothing to import: no speculative-decoding series; expected {EXPECTED}")
    if len(timing.by_option) > 1:
        raise ImportInputError(
            f"--time dates one snapshot, but {len(timing.by_option)} files have no time of their own "
            f"({', '.join(str(p) for p in timing.by_option)}): name each file with its scrape time "
            f"(e.g. metrics-2026-11-28T12:00:30Z.txt)")
    _timing_notes(summary, timing)
    groups = reader.groups
    mapping.check_matches(list(groups))

    # group → deployment
    by_deployment: dict[str, list[Group]] = defaultdict(list)
    for key in sorted(groups):
        group = groups[key]
        if len(group.engines) > 1:
            raise ImportInputError(f"the label group {_describe(key)} has spec_decode counters of both "
                                   f"{' and '.join(sorted(e + ':' for e in group.engines))}; import them separately")
        dep = mapping.lookup(dict(key))
        if dep is None:
            summary.skip("label group not mapped by --deployment")
            summary.note(f"label group {_describe(key)} matches no --deployment pair: not imported")
            continue
        by_deployment[dep].append(group)

    cols: dict[str, list] = {c: [] for c in INTERVAL_COLUMNS + REPORTED_COLUMNS}
    why: list[str] = []              # what kept rows from being written, for a nothing-imported error
    for dep in mapping.ids:
        resets, positions, reported = 0, 0, 0
        imported: list[Group] = []
        reset_series: list[str] = []
        for group in by_deployment.get(dep, []):
            if not _importable(group, dep, summary, why):
                continue
            rows, g_resets, g_positions = _intervals(group, summary, why)
            resets += g_resets
            if g_resets:
                reset_series.append(series_name(group.labels) or "(no labels)")
            positions = max(positions, g_positions)
            imported.append(group)
            for end in sorted(rows):
                row = rows[end]
                cols["deployment_id"].append(dep)
                cols["series"].append(series_name(group.labels))
                cols["start_time"].append(row["start"])
                cols["end_time"].append(end)
                cols["num_drafts"].append(row["num_drafts"])
                cols["num_draft_tokens"].append(row["num_draft_tokens"])
                cols["num_accepted_tokens"].append(row["num_accepted_tokens"])
                cols["accepted_per_position"].append(row["per_pos"])
                cols["source"].append(INTERVAL_SOURCE)
                cols["reported_accept_length"].append(row["reported"])
                cols["reported_accept_length_definition"].append(
                    SGLANG_DEFINITION if row["reported"] is not None else None)
                reported += row["reported"] is not None
        if resets:
            summary.note(f"{resets} counter reset{'s' if resets != 1 else ''} (a counter decreased: a restart); "
                         f"the new values were taken as the deltas"
                         + (f" (series {'; '.join(reset_series)})" if len(imported) > 1 else ""), dep)
        if len(imported) > 1:
            summary.note(f"{len(imported)} series (label groups), each with its own intervals: "
                         + "; ".join(series_name(g.labels) or "(no labels)" for g in imported), dep)
        if reported:
            summary.note(f"reported_accept_length on {reported} interval{'s' if reported != 1 else ''} is "
                         f"SGLang's sglang:spec_accept_length gauge at the interval's end: a level over SGLang's "
                         f"last decode log interval, kept as reported and never differenced", dep)
        models = {dict(g.labels).get("model_name") for g in by_deployment.get(dep, [])} - {None}
        if len(models) > 1 and overrides.model is None:
            summary.note("the label groups name several model_name values (" + ", ".join(sorted(models))
                         + "): model left unknown", dep)
        row = deployment_row(dep, overrides, model=models.pop() if len(models) == 1 else None,
                             speculated=bool(imported), num_spec_tokens=positions or None)
        if not by_deployment.get(dep):
            summary.note("no spec_decode series for this deployment", dep)
        writer.merge_deployment(row, summary)
    if not cols["end_time"]:
        reasons = "; ".join(dict.fromkeys(why)) or "no label group maps to a deployment"
        raise ImportInputError(f"{', '.join(str(p) for p in files)}: nothing to import: {reasons}")
    writer.add("intervals", cols, times=cols["end_time"], drop_empty_optional=("series",) + REPORTED_COLUMNS)
    default = mapping.ids[0] if len(mapping.ids) == 1 else None
    return finish(writer, summary, default)


def _importable(group: Group, dep: str, summary: ImportSummary, why: list[str]) -> bool:
    """False (noted) for a group whose samples can't be turned into interval counts."""
    where = _describe(group.labels)
    if group.v0:
        summary.skip(V0_SKIPPED)
        summary.note(f"label group {where} carries vLLM V0 metrics ({', '.join(sorted(group.v0))}): not imported. "
                     f"V0 incremented its Prometheus spec-decode counters by its cumulative totals at every log "
                     f"interval (a sum of sums, vllm-project/vllm#15415, closed unmerged), so the difference of two "
                     f"samples is not the tokens of the interval; import V0's log lines with "
                     f"`specan import vllm-log` instead", dep)
        why.append("vLLM V0 counters (sums of cumulative totals, not interval counts): use `specan import "
                   "vllm-log` on V0's log lines")
        return False
    if not group.has_counts and group.samples.get("accept_length"):
        summary.skip("label group with only the sglang:spec_accept_length gauge")
        summary.note(f"label group {where} has SGLang's sglang:spec_accept_length gauge but no draft or accepted "
                     f"token counters (SGLang exports none): an interval needs counts, so nothing is imported from "
                     f"it; `specan import sglang-responses` reads SGLang's per-request counts", dep)
        why.append("only SGLang's sglang:spec_accept_length gauge, a level and no counts (SGLang exports no "
                   "spec-decode counters): use `specan import sglang-responses`")
        return False
    return True


def _intervals(group: Group, summary: ImportSummary, why: list[str]) -> tuple[dict[int, dict], int, int]:
    """end µs → interval row of one label group, the number of reset intervals, and positions."""
    s = group.samples
    main = s.get("num_draft_tokens")
    if not group.has_counts:
        summary.skip("label group without num_draft_tokens and num_accepted_tokens series")
        summary.note(f"label group {_describe(group.labels)} lacks the draft or accepted token counters: "
                     f"not imported")
        why.append("label groups without both num_draft_tokens and num_accepted_tokens counters")
        return {}, 0, 0
    positions = sorted(k[1] for k in s if isinstance(k, tuple))
    contiguous = positions == list(range(len(positions)))
    counters = ["num_drafts", "num_draft_tokens", "num_accepted_tokens"] + [("pos", i) for i in positions]
    times = sorted(main)
    gauge = s.get("accept_length", {})
    rows: dict[int, dict] = {}
    resets = 0
    pairs = list(zip(times, times[1:]))
    since = group.counting_since()
    if len(times) == 1 and since is not None and since < times[0]:
        # one scrape: its counters counted from 0 since their `_created` time, so that is the interval's start
        pairs = [(since, times[0])]
        s = {c: ({since: 0.0} | values) for c, values in s.items()}
        summary.note(f"label group {_describe(group.labels)}: one scrape, so one interval from its counters' "
                     f"`_created` time ({_iso(since)}, when they started counting from 0: the engine's start) to "
                     f"the scrape ({_iso(times[0])}); its counts are everything since the engine started")
    elif len(times) == 1:
        summary.note(f"label group {_describe(group.labels)} has one sample time and no `_created` time before "
                     f"it: an interval is the difference of two snapshots, or runs from the counters' `_created` "
                     f"time")
        why.append("one sample time (one snapshot) per label group and no `_created` time: an interval is the "
                   "difference of two snapshots, or runs from the counters' `_created` time")
    for start, end in pairs:
        before = {c: s[c].get(start) for c in counters if c in s}
        after = {c: s[c].get(end) for c in counters if c in s}
        if before.get("num_accepted_tokens") is None or after.get("num_accepted_tokens") is None:
            summary.skip("interval without an accepted tokens sample at both ends")
            continue
        reset = any(before[c] is not None and after[c] is not None and after[c] < before[c] for c in before)
        resets += reset

        def delta(c):
            if before.get(c) is None or after.get(c) is None:
                return None
            return int(round(after[c] if reset else after[c] - before[c]))

        per_pos = [delta(("pos", i)) for i in positions] if positions and contiguous else None
        if per_pos is not None and any(v is None for v in per_pos):
            per_pos = None
        rows[end] = {"start": start, "num_drafts": delta("num_drafts"),
                     "num_draft_tokens": delta("num_draft_tokens"),
                     "num_accepted_tokens": delta("num_accepted_tokens"), "per_pos": per_pos,
                     "reported": gauge.get(end)}   # a level at the interval's end: never differenced
    return rows, resets, len(positions)


def _iso(t_us: int) -> str:
    return (EPOCH_UTC + dt.timedelta(microseconds=t_us)).isoformat(timespec="seconds").replace("+00:00", "Z")


EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _timing_notes(summary: ImportSummary, timing: _Timing) -> None:
    plural = lambda n: f"{n} file{'s' if n != 1 else ''}"  # noqa: E731
    parts = []
    if timing.by_samples:
        n = len(timing.by_samples)
        parts.append(f"{plural(n)} by {'its' if n == 1 else 'their'} sample timestamps")
    if timing.by_name:
        n = len(timing.by_name)
        parts.append(f"{plural(n)} by the time in {'its name' if n == 1 else 'their names'}")
    if timing.by_option:
        parts.append(f"{timing.by_option[0]} by --time")
    if parts:
        summary.note("/metrics snapshot times: " + ", ".join(parts))
    for path, t_us in timing.by_mtime:
        summary.note(f"{path}: no sample timestamps, no time in its name and no --time: dated by the file's "
                     f"modification time, {_iso(t_us)} (a scrape saved by `curl -o` carries the time it was "
                     f"written; a copied or edited file does not: name it with its scrape time, or give --time)")
    if timing.unzoned_names:
        summary.note(f"{plural(len(timing.unzoned_names))} named with a time without a zone: read as UTC")
    if timing.by_option and timing.option is not None and not timing.option[1]:
        summary.note("--time has no zone: read as UTC")
    if timing.option is not None and not timing.by_option:
        summary.note("--time not used: every sample has a time of its own")
