"""`specan import sglang-log`: SGLang's periodic ``Decode batch`` line → intervals.

SGLang's scheduler logs one line every ``--decode-log-interval`` decode steps
(40 by default). Every field is read by its label where present, so a layout is
a set of fields, not a regex (docs/importers.md has the table, the release
wheels' ``log_decode_stats`` the format strings, tests/fixtures/sglang_logs/ real
lines of each):

1. 0.4.1.post* – 0.4.6: ``Decode batch. #running-req: N, #token: N, token usage: X,
   accept len: X, [pre-allocated usage: X,] gen throughput (token/s): X, #queue-req: N``.
2. to 0.5.3 (2025): adds ``cuda graph: B`` (``cpu graph``, later ``npu graph``) before
   the throughput, PD decode servers ``#prealloc-req``, ``#transfer-req``,
   ``#retracted-req``; ``#queue-req: N, `` ends with a comma.
3. 0.5.4: ``Decode batch [N], …`` (the forward iteration), and ``accept rate: X``
   after the accept length.
4. 0.5.5 on: ``Decode batch, …`` (``Decode batch [N],`` with SGLANG_LOG_FORWARD_ITERS); no comma
   after ``#queue-req: N`` from 0.5.10.
5. hybrid models print pool usages instead of ``#token, token usage``:
   ``full token usage``, ``swa token usage``, ``mamba usage``.

**Accept length.** ``accept len`` is the tokens committed per request per verify
step over the log interval (accepted drafts plus the bonus token), printed to 2
decimals. It goes to reported_accept_length as printed. The line has no counts:
num_draft_tokens, num_accepted_tokens and num_drafts stay null (docs/importers.md).

**Accept rate** changed meaning in SGLang 0.5.11 (PR #23530, 2026-04): before, accept
len ÷ tokens verified per step (``speculative_num_steps + 1`` in 0.5.4–0.5.5,
``speculative_num_draft_tokens`` in 0.5.6–0.5.10.post1), which counts the bonus
token; from 0.5.11, accepted drafts ÷ proposed drafts. A line can't tell which, so
the rate is kept only with ``--sglang-version`` (and only where the intervals schema
has the column), else dropped with a note. With it, the draft tokens per verify
step are the one whole number that every line's accept len and accept rate allow
(each rounded to 2 decimals), when there is one.

A **series** is the rank prefix of the line (``TP0``, ``DP3 TP3 EP3``) plus any text
a log shipper put before SGLang's ``[date time ranks]`` (a docker compose service).
An interval starts at the previous decode line of its series: SGLang averages the
generation throughput since its previous decode line, whatever came between, so that
is the window its throughput covers (a line without a time breaks the chain). SGLang's
times are whole seconds (milliseconds only with SGLANG_LOG_MS=1) and it often logs
several times in a second, each line a batch of its own: every line is kept, and the
n lines of one series printed with one time get an order within it, the i-th (from 0)
at that time + i/n of the printed resolution (a second, or a millisecond), so the key
(series, end_time) never repeats and the chain keeps the log's order. The lengths of
such windows are estimates (a note says so); the total over a run of lines is not.
Times have no time zone and are read as UTC.

**Baseline logs.** A log whose decode lines never print accept len or accept rate
comes from a server that does not speculate: each decode line becomes an interval
(running requests, generation throughput, token usage; no accept length), and the
deployment's method is ``none`` unless ``--method`` says otherwise. In a speculative
log a decode line without accept len is skipped and counted, as before.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .common import (ImportInputError, ImportSummary, Overrides, TraceWriter, _schema_columns, datetime_us,
                     deployment_row, finish, open_input)

SOURCE = "sglang-log"
INTERVAL_SOURCE = "sglang_log"

OTHER_LINE = "not a decode line"
NO_SPEC = "decode line without accept len (speculative decoding off)"
NOT_PARSED = "decode line that does not parse"
NO_TIME = "decode line without a date and time"
BAD_DATE = "decode line with an impossible date"

LAYOUTS = ("`Decode batch. #running-req, #token, token usage, accept len, gen throughput (token/s), #queue-req` "
           "(0.4.1.post*–0.4.6)",
           "… with `cuda graph` and PD decode `#prealloc-req, #transfer-req, #retracted-req` (to 0.5.3)",
           "`Decode batch [N], … accept len, accept rate, …` (0.5.4)",
           "`Decode batch, … accept len, accept rate, …` (0.5.5 on)",
           "hybrid models: `full token usage`, `swa token usage`, `mamba usage` instead of `token usage`")

INTERVAL_COLUMNS = ("deployment_id", "series", "start_time", "end_time", "num_drafts", "num_draft_tokens",
                    "num_accepted_tokens", "accepted_per_position", "source")
LOAD_COLUMNS = ("running_requests", "waiting_requests", "generation_tokens_per_s", "kv_cache_usage",
                "reported_accept_length", "reported_accept_length_definition")
# Proposed in docs/importers.md; written only once schemas/intervals.json declares them.
RATE_COLUMNS = ("reported_accept_rate", "reported_accept_rate_definition")

ACCEPT_LENGTH_DEFINITION = ("tokens committed per request per verify step (accepted drafts and the bonus token), "
                            "over the log interval, as SGLang prints its accept len (2 decimals)")
OLD_STEPS = ("accept len ÷ (speculative_num_steps + 1), as SGLang 0.5.4–0.5.5 print it (2 decimals); "
             "it counts the bonus token, so it is not accepted ÷ proposed drafts")
OLD_DRAFT_TOKENS = ("accept len ÷ speculative_num_draft_tokens, as SGLang 0.5.6–0.5.10 print it (2 decimals); "
                    "it counts the bonus token, so it is not accepted ÷ proposed drafts")
NEW_RATE = ("accepted drafts ÷ proposed drafts (speculative_num_draft_tokens − 1 per request per verify step), "
            "as SGLang 0.5.11 and later print it (2 decimals)")

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_MARKER = re.compile(r"Decode batch( \[\d+\])?([.,])")
# SGLang's prefix: [%(asctime)s{.msecs}{ DPn}{ PPn}{ ATTN_CPn}{ MOE_DPn}{ TPn}{ EPn}]
_PREFIX = re.compile(r"\[(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?((?: [A-Z][A-Z_]*\d+)*)\]")
_ISO = re.compile(r"^\s*(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?\s*")
_X2 = r"(\d+\.\d{2})(?![\d.])"      # SGLang prints these with :.2f; fewer decimals is a line cut short
_FIELDS = {
    "running_requests": re.compile(r"#running-req: (\d+)"),
    "waiting_requests": re.compile(r"#queue-req: (\d+)"),
    "generation_tokens_per_s": re.compile(r"gen throughput \(token/s\): " + _X2),
    "token_usage": re.compile(r"(?:^|, )token usage: " + _X2),
    "full": re.compile(r"full token usage: " + _X2),
    "swa": re.compile(r"swa token usage: " + _X2),
    "mamba": re.compile(r"mamba usage: " + _X2),
    "accept_len": re.compile(r"accept len: " + _X2),
    "accept_rate": re.compile(r"accept rate: " + _X2),
}
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.-]?(?:post|rc|dev|a|b)\d*)*(?:\+[\w.]+)?$", re.IGNORECASE)
_HALF = 0.005        # half the last printed digit
_EPS = 1e-9


def parse_version(text: str) -> tuple[int, int, int]:
    """``0.5.11``, ``v0.5.10.post1``, ``0.5.11rc0`` → (0, 5, 11): the release it belongs to."""
    m = _VERSION.match(text.strip())
    if m is None:
        raise ImportInputError(f"--sglang-version: {text!r} is not a version like 0.5.11 "
                               "(python -c 'import sglang; print(sglang.__version__)')")
    return int(m[1]), int(m[2]), int(m[3] or 0)


def rate_meaning(version: tuple[int, int, int]) -> tuple[str, str] | None:
    """("old" | "new", definition) of the accept rate SGLang ``version`` prints; None before 0.5.4,
    whose releases print none (development builds of October 2025 did, with other meanings)."""
    if version < (0, 5, 4):
        return None
    if version < (0, 5, 6):
        return "old", OLD_STEPS
    if version < (0, 5, 11):
        return "old", OLD_DRAFT_TOKENS
    return "new", NEW_RATE


def parse_decode(message: str) -> dict:
    """The fields of a decode line's message (the text from ``Decode batch`` on); absent ones are left out.
    kv_cache_usage is ``token usage``, else the largest pool usage printed (what SGLang exports as its
    token_usage for hybrid models)."""
    found = {}
    for name, pattern in _FIELDS.items():
        m = pattern.search(message)
        if m is not None:
            found[name] = int(m[1]) if name.endswith("requests") else float(m[1])
    pools = [found.pop(p) for p in ("full", "swa", "mamba") if p in found]
    if "token_usage" in found:
        found["kv_cache_usage"] = found.pop("token_usage")
    elif pools:
        found["kv_cache_usage"] = max(pools)
        found["from_pools"] = True
    return found


def draft_tokens_per_step(pairs: Sequence[tuple[float, float]], kind: str) -> tuple[int | None, bool]:
    """(k, consistent): the one whole number of draft tokens per verify step that every (accept len,
    accept rate) pair allows under the rate's meaning, each value ±0.005 of what was printed.

    old: rate = len / (k + 1); new: rate = (len − 1) / k. k is None when no pair informs it or more
    than one whole number fits; consistent is False when none fits."""
    lo, hi, used = 1.0, math.inf, 0
    for length, rate in pairs:
        if rate <= 0:
            continue      # nothing accepted (new), or a rate that says nothing of k
        top = rate - _HALF
        if kind == "new":
            a = (length - _HALF - 1) / (rate + _HALF)
            b = (length + _HALF - 1) / top if top > 0 else math.inf
        else:
            a = (length - _HALF) / (rate + _HALF) - 1
            b = (length + _HALF) / top - 1 if top > 0 else math.inf
        lo, hi, used = max(lo, a), min(hi, b), used + 1
    if not used:
        return None, True
    first, last = math.ceil(lo - _EPS), math.floor(hi + _EPS) if math.isfinite(hi) else math.inf
    if last < first:
        return None, False
    return (first if last == first else None), True


@dataclass
class _Series:
    previous_end: int | None = None     # the previous decode line of the series (its counters reset there)


def _resolution_us(fraction: str | None) -> int:
    """The step of a printed time: a whole second, or its last printed decimal."""
    return 10 ** (6 - min(len(fraction), 6)) if fraction else 1_000_000


def _stamp(line: str, before: int) -> tuple[int | None, str | None, re.Match | None, int]:
    """(epoch µs, problem, SGLang prefix match, printed resolution µs) of a line: SGLang's own prefix,
    else a shipper's ISO time."""
    head = line[:before]
    m = None
    for m in _PREFIX.finditer(head):
        pass
    if m is not None:
        try:
            when = dt.datetime(int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]), int(m[6]),
                               int((m[7] or "0").ljust(6, "0")), tzinfo=dt.timezone.utc)
        except ValueError:
            return None, BAD_DATE, m, 0
        return datetime_us(when), None, m, _resolution_us(m[7])
    iso = _ISO.match(line)
    if iso is not None:
        try:
            when = dt.datetime.fromisoformat(iso.group(0).strip().replace("Z", "+00:00").replace(" ", "T"))
        except ValueError:
            return None, BAD_DATE, None, 0
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        return datetime_us(when.astimezone(dt.timezone.utc)), None, None, _resolution_us(iso[7])
    return None, NO_TIME, None, 0


def _decode_lines(path: Path):
    """(line number, line, marker, (epoch µs, problem, prefix, resolution), series name) of each decode line."""
    with open_input(path) as fh:
        for number, raw in enumerate(fh, start=1):
            line = _ANSI.sub("", raw.rstrip("\r\n"))
            marker = _MARKER.search(line)
            if marker is None:
                yield number, line, None, None, None
                continue
            stamp = _stamp(line, marker.start())
            yield number, line, marker, stamp, _series_name(line, stamp[2], marker.start())


def _series_name(line: str, prefix: re.Match | None, before: int) -> str:
    """A shipper's prefix (without its timestamp) and SGLang's rank tags, e.g. ``sglang-1 DP0 TP0``."""
    outside = line[:prefix.start()] if prefix is not None else line[:before]
    outside = _ISO.sub("", outside).replace("|", " ")
    if prefix is None:
        outside = re.sub(r"\[[^\]]*\]", " ", outside)
    ranks = prefix[8] if prefix is not None else ""
    return re.sub(r"\s+", " ", f"{outside} {ranks}").strip()


def import_sglang_log(files: Sequence[str | Path], out: str | Path, deployment_id: str,
                      overrides: Overrides | None = None, sglang_version: str | None = None) -> ImportSummary:
    """Import SGLang server logs into TRACES ``out`` as intervals of ``deployment_id``.

    ``sglang_version``: the SGLang release that wrote the logs; only with it is ``accept rate`` kept."""
    overrides = overrides or Overrides()
    version = parse_version(sglang_version) if sglang_version is not None else None
    meaning = rate_meaning(version) if version is not None else None
    writer = TraceWriter(Path(out), SOURCE, files,
                         options=f"deployment={deployment_id} sglang_version={sglang_version} {overrides}")
    writer.check_layout(("intervals", "import_notes"))
    store_rate = meaning is not None and all(c in _schema_columns("intervals") for c in RATE_COLUMNS)
    summary = ImportSummary(SOURCE, Path(out), quiet_reasons=frozenset({OTHER_LINE, NO_SPEC, NOT_PARSED, NO_TIME,
                                                                        BAD_DATE}))
    columns = INTERVAL_COLUMNS + LOAD_COLUMNS + (RATE_COLUMNS if store_rate else ())
    cols: dict[str, list] = {c: [] for c in columns}
    plain: dict[str, list] = {c: [] for c in columns}      # the decode lines without accept len
    counts = {"rates": 0, "cut": 0, "pools": 0, "backwards": 0, "speculative_lines": 0, "ordered": 0}
    plain_counts = {"rates": 0, "cut": 0, "pools": 0, "backwards": 0, "ordered": 0}
    layouts: dict[str, int] = {}
    plain_layouts: dict[str, int] = {}
    where = summary.places               # skip reason → its first three places (file:line)
    no_spec: list[str] = []              # places of decode lines without accept len
    pairs: list[tuple[float, float]] = []
    first_unparsed: str | None = None

    for path in files:
        path = Path(path)
        series_of: dict[str, _Series] = {}
        # how many decode lines of a series share each printed time, and how many of them came so far
        decoded = list(_decode_lines(path))
        sharing = Counter((name, stamp[0]) for _, _, marker, stamp, name in decoded
                          if marker is not None and stamp[0] is not None)
        seen: Counter = Counter()
        for number, line, marker, stamp, name in decoded:
            place = f"{path}:{number}"
            if marker is None:
                summary.skip(OTHER_LINE)
                continue
            end_us, problem, _, resolution = stamp
            shared = sharing[(name, end_us)] if end_us is not None else 1
            if shared > 1:
                order = seen[(name, end_us)]
                seen[(name, end_us)] += 1
                end_us += order * resolution // shared
            series = series_of.setdefault(name, _Series())
            start_us = series.previous_end
            # SGLang resets its counters and its throughput clock when it logs; a line without a
            # time ends a window nobody knows
            series.previous_end = end_us
            message = line[marker.start():]
            fields = parse_decode(message)
            speculative = "accept_len" in fields
            if "accept len" in message or "accept rate" in message:
                counts["speculative_lines"] += 1
                if not speculative:
                    first_unparsed = first_unparsed or place
                    summary.skip(NOT_PARSED, place=place)
                    continue
            if problem:
                summary.skip(problem, place=place)
                continue
            if not speculative:
                no_spec.append(place)
            got, got_counts, got_layouts = (cols, counts, layouts) if speculative else (plain, plain_counts,
                                                                                        plain_layouts)
            if start_us is not None and end_us < start_us:
                got_counts["backwards"] += 1
            got_counts["ordered"] += shared > 1
            layout = ("`Decode batch.`" if marker[2] == "." else
                      "`Decode batch [N],`" if marker[1] else "`Decode batch,`")
            rate = fields.get("accept_rate")
            layout += " with accept rate" if "accept rate" in message else ""
            got_layouts[layout] = got_layouts.get(layout, 0) + 1
            got_counts["cut"] += "waiting_requests" not in fields
            got_counts["pools"] += fields.get("from_pools", False)
            if rate is not None:
                got_counts["rates"] += 1
                pairs.append((fields["accept_len"], rate))
            row = {"deployment_id": deployment_id, "series": name or None, "start_time": start_us,
                   "end_time": end_us, "num_drafts": None, "num_draft_tokens": None,
                   "num_accepted_tokens": None, "accepted_per_position": None, "source": INTERVAL_SOURCE,
                   **{c: fields.get(c) for c in LOAD_COLUMNS[:4]},
                   "reported_accept_length": fields.get("accept_len"),
                   "reported_accept_length_definition": ACCEPT_LENGTH_DEFINITION if speculative else None,
                   "reported_accept_rate": rate if meaning is not None else None,
                   "reported_accept_rate_definition": meaning[1] if meaning and rate is not None else None}
            for column in got:
                got[column].append(row[column])

    baseline = not counts["speculative_lines"]
    if baseline:
        cols, layouts, counts = plain, plain_layouts, {**plain_counts, "speculative_lines": 0}
    elif no_spec:
        summary.skip(NO_SPEC, n=len(no_spec))
        where[NO_SPEC] = no_spec[:3]
    if not cols["end_time"]:
        tried = first_unparsed or next((p for r in (NO_TIME, BAD_DATE) for p in where.get(r, [])), None)
        looked = (f"the first decode line that did not import is {tried}" if tried else
                  "no line looks like SGLang's `Decode batch` line")
        raise ImportInputError(f"{', '.join(str(p) for p in files)}: nothing to import: {looked} "
                               "(layouts: `specan import sglang-log --list-layouts`)")
    _notes(summary, deployment_id, counts, layouts, where, cols, baseline)
    k = _rate_notes(summary, deployment_id, sglang_version, meaning, store_rate, counts, pairs)
    row = deployment_row(deployment_id, overrides, model=None, speculated=not baseline, num_spec_tokens=k)
    writer.merge_deployment(row, summary)
    writer.add("intervals", cols, times=cols["end_time"],
               drop_empty_optional=LOAD_COLUMNS + ("series",) + (RATE_COLUMNS if store_rate else ()))
    return finish(writer, summary, deployment_id)


def _rate_notes(summary: ImportSummary, deployment_id: str, sglang_version: str | None,
                meaning: tuple[str, str] | None, store_rate: bool, counts: dict,
                pairs: list[tuple[float, float]]) -> int | None:
    """What became of the accept rate; returns the draft tokens per verify step it gives, if any."""
    note = lambda text: summary.note(text, deployment_id)  # noqa: E731
    n = counts["rates"]
    if not n:
        return None
    lines = f"{n} line{'s' if n != 1 else ''}"
    if sglang_version is None:
        note(f"accept rate dropped from {lines}: its meaning changed in SGLang 0.5.11 (2026-04: accepted ÷ "
             "proposed drafts; before, accept len ÷ tokens verified per step); pass --sglang-version to keep it")
        return None
    if meaning is None:
        note(f"accept rate dropped from {lines}: SGLang {sglang_version} releases print none, so these lines "
             "come from a development build, whose accept rate meaning is unknown")
        return None
    kind, definition = meaning
    if store_rate:
        note(f"accept rate kept on {lines} as SGLang {sglang_version} means it: {definition}")
    else:
        note(f"accept rate not stored ({lines}): the intervals schema has no reported_accept_rate column")
    k, consistent = draft_tokens_per_step(pairs, kind)
    if k is not None:
        note(f"num_speculative_tokens = {k}: the only whole number of draft tokens per verify step that every "
             f"line's accept len and accept rate allow (as printed, 2 decimals), read as SGLang {sglang_version} "
             "means the rate")
    elif not consistent:
        note(f"no whole number of draft tokens per verify step fits every line's accept len and accept rate as "
             f"SGLang {sglang_version} means the rate: another version wrote the log, or the draft size changed")
    return k


def _notes(summary: ImportSummary, deployment_id: str, counts: dict, layouts: dict, where: dict,
           cols: dict, baseline: bool) -> None:
    note = lambda text: summary.note(text, deployment_id)  # noqa: E731
    plural = lambda n, word: f"{n} {word}{'s' if n != 1 else ''}"  # noqa: E731
    note("layouts read: " + ", ".join(f"{name} ({n})" for name, n in sorted(layouts.items())))
    note("log times have no time zone: read as UTC")
    if baseline:
        note("no decode line prints accept len or accept rate: a deployment that does not speculate (a "
             "baseline); one interval per decode line, with its running requests, generation throughput and "
             "token usage, and no counts")
    else:
        note("num_draft_tokens, num_accepted_tokens and num_drafts are null: SGLang's decode line prints ratios, "
             "not counts; reported_accept_length is its accept len (committed tokens per verify step)")
    if counts["pools"]:
        note(f"kv_cache_usage on {plural(counts['pools'], 'interval')} is the largest pool usage printed "
             "(full, swa, mamba), as SGLang reports token usage for hybrid models")
    if counts["cut"]:
        note(f"{plural(counts['cut'], 'decode line')} cut short (no #queue-req): the fields missing from "
             f"{'it are' if counts['cut'] == 1 else 'them are'} null")
    series = {s for s in cols["series"] if s}
    if len(series) > 1:
        note(f"{len(series)} series (ranks or processes): " + ", ".join(sorted(series))
             + "; each interval starts at the previous decode line of its own series")
    if counts["backwards"]:
        note(f"{counts['backwards']} lines are earlier than the line before: the loader will reject them "
             "as time_order")
    if counts["ordered"]:
        note(f"{counts['ordered']} decode lines share their printed time with other lines of their series (SGLang prints whole seconds unless SGLANG_LOG_MS=1): the n "
             "lines of one time are ordered within it, the i-th (from 0) at that time + i/n of a second (or of "
             "the last printed digit), so the window lengths around them are estimates; the total over a run "
             "of lines is as printed")
    for reason, places in sorted(where.items()):
        if reason in summary.skipped:
            note(f"{plural(summary.skipped[reason], 'line')} skipped ({reason}), first at {', '.join(places)}")
