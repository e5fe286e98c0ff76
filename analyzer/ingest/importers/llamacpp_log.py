"""`specan import llamacpp-log`: llama.cpp server's per-request timings → intervals, requests.

llama-server reports speculative decoding once per request, as totals: the drafts
it generated and the drafts the target accepted, never the drafts of each round.
It does so in two places, and this importer reads both, line by line, in any mix:

**The log** (``print_timing``, after each request), in four layouts
(docs/importers.md has the table, tests/fixtures/llamacpp/ real lines of each)::

    slot print_timing: id  0 | task 854 |
    prompt eval time =    4063.52 ms /    96 tokens (...)
           eval time =   31868.65 ms /   221 tokens (...)
          total time =   35932.18 ms /   317 tokens
    draft acceptance rate = 0.69953 (  149 accepted /   213 generated)

1. ``draft acceptance rate = R (A accepted / G generated)``, a bare line after the
   multi-line timing block (examples/server, then tools/server, 2025-04 to 2026-05);
2. ``draft acceptance = R (A accepted / G generated)`` after a ``graphs reused`` line
   (PR #23279, 2026-05), bare or with every line's own ``slot print_timing: id S |
   task T |`` prefix;
3. … ``, mean acceptance length = M, acceptance rate per position = (r1, …)``
   (PR #24536, 2026-06);
4. … ``, mean len = M``, the rates per position only at trace verbosity, on a line
   of their own: ``acc per pos = (r1, …)`` (current).

Fields are read by their labels, so a layout is a set of fields. A block is the
lines of one request: keyed by its ``slot S | task T`` prefix, or, for the bare
lines of layout 1, by the process prefix (a log shipper's or llama-swap's text
before llama.cpp's) and the ``slot print_timing: id S | task T |`` line before them.

**Times.** A log shipper's ISO-8601 timestamp on a line wins; else llama.cpp's own
``M.SS.mmm.uuu`` (from the server's start) plus ``--start``, or the file's modification
time minus its last relative time (noted as estimated). ``statistics`` lines (the slot's
cumulative counters per drafter) are differenced per request; per-round debug lines
(``accepted A/D draft tokens, new n_tokens = N``) become rounds.

**The JSON responses** (JSONL, or a captured stream's ``data:`` lines; optionally
in the ``{"response": …, "sent_at": …}`` wrapper of the other response importers):
the ``timings`` object (``prompt_n``, ``prompt_ms``, ``predicted_n``,
``predicted_ms``, ``cache_n``, and ``draft_n`` / ``draft_n_accepted`` when the
request drafted); one value per line or pretty-printed, and bare ``timings``
objects (``jq .timings``: an intervals row, no requests row).

**The CLI summaries** of ``llama-speculative``, ``-simple`` and ``lookup`` (``n_drafted``,
``n_accept``, ``accept = X%``): one intervals row per run. These and bare ``timings`` have
no time of their own: they start at ``--start``, else end at the file's modification time.

**What is written** (only what is exact; docs/importers.md says what is lost):

- each request that drafted → one ``intervals`` row, its own series: drafted and
  accepted exactly; num_drafts (verification steps) from a printed mean and rates:
  exact when they allow one whole number, else approximate (noted), else null;
- each JSON response → one ``requests`` row (prompt and output tokens, finish
  reason, times laid out with llama.cpp's own durations);
- rounds only where they are exact: for a deployment in which no request drafted,
  output_tokens − 1 plain rounds per response. Rounds of a request that drafted
  can't be rebuilt: its number of rounds and the drafts of each are not printed.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .common import (STOP_REASON, ImportInputError, ImportSummary, Overrides, RoundsBuffer, TraceWriter, open_input,
                     datetime_us, deployment_row, epoch_us, finish, is_number, ms_us, parse_time, reconcile)
from .responses import FINISH_REASON, OPTIONAL_REQUEST_COLUMNS, RequestsBuffer, Where, get, wrapper_values

SOURCE = "llamacpp-log"
LOG_SOURCE = "llamacpp_log"             # intervals.source of a log block
RESPONSE_SOURCE = "llamacpp_response"   # intervals.source of a JSON response's timings

# skip reasons
OTHER_LINE = "not llama.cpp timing output"
NOT_PARSED = "timing line that does not parse"
CONTRADICTS = ("draft acceptance line whose counts contradict it (accepted > generated, or rate ≠ accepted / "
               "generated)")
NO_DRAFT_LINE = ("print_timing block without a draft acceptance line (the request drafted nothing, or the server "
                 "does not speculate)")
NO_CLOCK = "timing block without a wall-clock time (llama.cpp's own log times count from the server's start)"
BAD_DATE = "timing line with an impossible date"
JSON_BROKEN = "JSON line that does not parse"
NO_TIMINGS = "JSON record without a timings object (a stream chunk, an error)"
PARTIAL = "stream chunk before the last one (timings_per_token: the request's timings so far)"
TIMINGS_INCOMPLETE = "timings object without prompt_ms, predicted_n or predicted_ms, or with a negative value"
RESP_NO_TIME = "response without sent_at or created (no wall-clock time)"
NO_FINISH = "response without a finish reason"
NO_PROMPT = "response without a prompt token count (usage, tokens_evaluated, or timings.cache_n + prompt_n)"
MULTI_CHOICE = "response with more than one choice (its counts can't be split)"
REPEATED = "request id already read in this import"
STATS_UNDIFFERENCED = ("statistics line of a block without a draft acceptance line, with no earlier statistics "
                       "line of its slot and drafter to difference (its counters run from the server's start)")
STATS_UNUSED = ("statistics line that gives no request's counts (no earlier line of its slot and drafter to "
                "difference, or its request was not imported): kept as the baseline of the next")
STATS_CONTRADICT = "statistics lines whose per-request difference contradicts the request's draft acceptance line"
CLI_NOTHING_DRAFTED = "llama-speculative / lookup summary with n_drafted = 0 (nothing drafted)"
CLI_INCOMPLETE = "llama-speculative / lookup summary without n_drafted or n_accept before its accept line"
JSON_UNFINISHED = "pretty-printed JSON that never closes (or is longer than 10,000 lines)"

LAYOUTS = ("`draft acceptance rate = R (A accepted / G generated)` on a bare line after the "
           "`slot print_timing: id S | task T |` block (2025-04 to 2026-05)",
           "`draft acceptance = R (A accepted / G generated)` after `graphs reused` (2026-05, PR #23279), bare or "
           "with the `slot print_timing: id S | task T |` prefix on every line",
           "… `, mean acceptance length = M, acceptance rate per position = (r1, …)` (2026-06, PR #24536)",
           "… `, mean len = M`, rates per position on an `acc per pos = (…)` line at trace verbosity (current)",
           "a JSON response or stream `data:` line with a `timings` object (`draft_n`, `draft_n_accepted` "
           "from 2025-03, PR #12603), one per line or pretty-printed, or a bare `timings` object (`jq .timings`)",
           "the `n_draft` / `n_predict` / `n_drafted` / `n_accept` / `accept = P%` summary of `llama-speculative`, "
           "`llama-speculative-simple` and `llama-lookup` (2023-08 on)")

MEAN_DEFINITION = "1 + accepted / verification steps, as llama.cpp prints it (2 decimals)"

INTERVAL_COLUMNS = ("deployment_id", "series", "start_time", "end_time", "num_drafts", "num_draft_tokens",
                    "num_accepted_tokens", "accepted_per_position", "source", "reported_accept_length",
                    "reported_accept_length_definition")

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_ISO = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?")
_LLAMA_TIME = re.compile(r"(?<![\d.])\d+\.\d{2}\.\d{3}\.\d{3}(?: [IWEDT])?(?= |$)")  # M.SS.mmm.uuu and level
_SLOT = re.compile(r"slot print_timing: id\s+(\d+) \| task (-?\d+) \|")
_LABEL = re.compile(r"prompt eval time =|eval time =|total time =|draft acceptance|acc per pos =|statistics\s+\S+:"
                    r" #calls|slot\s+(?:update_slots|operator\(\)): id\s+\d+ \| task -?\d+ \| accepted")
# common_speculative_print_stats: one line per drafter of the slot, counters since the server's start
_STATS = re.compile(r"statistics\s+(\S+): #calls\(b,g,a\) =\s*(\d+)\s+(\d+)\s+(\d+), #gen drafts =\s*(\d+), "
                    r"#acc drafts =\s*(\d+), #gen tokens =\s*(\d+), #acc tokens =\s*(\d+)")
# Two per-round lines: SLT_DBG after each verification (-lv 4 / --verbose), `…, new n_tokens = N`, and
# with LLAMA_TRACE set an SLT_INF one before the round's tokens are sent (`accepted %2zu/%2zu draft
# tokens`, padded; `(restore checkpoint)` when the round is rolled back and replayed). Build 11434 prints
# both from a lambda inside update_slots (function name `operator()`) and returns before the debug line
# when the round ends its request, so only the trace lines give every round (tests/fixtures/llamacpp_e2e/).
_ROUND = re.compile(r"slot\s+(?:update_slots|operator\(\)): id\s+(\d+) \| task (-?\d+) \| accepted\s+(\d+)/\s*(\d+) "
                    r"draft tokens(?:, new n_tokens = (\d+)| (\(restore checkpoint\)))?\s*$")
# a message llama.cpp printed without its newline runs into the next line's own time (`…parser.0.00.385.841 I
# spec …`, build 11434): the glued text is the end of another message, not a process prefix
_GLUED = re.compile(r"^.*?[^\s\d](?=\d{1,4}\.\d{2}\.\d{3}\.\d{3} [IWEDT] )")
_SPEC_TAG = re.compile(r"(?:^|(?<=\s))spec \S{1,12}:\s*$")
# what a debug log says of a request besides its timings, for its requests row: the prompt's length (trace),
# why it stopped (debug; a stop string prints no line) and the KV length when its slot was released
_REQUEST_FACT = re.compile(r"slot\s+\S+: id\s+(\d+) \| task (-?\d+) \| (?:new prompt, .*task\.n_tokens = (\d+)$"
                           r"|(stopped by EOS|stopped by limit|stopped by time limit|stopped by indentation limit"
                           r"|stopped due to running out of context capacity)"
                           r"|stop processing: n_tokens = (\d+))")
STOPPED = {"stopped by EOS": ("stop", "eos")}        # every other printed stop is a limit
_SEPARATOR = re.compile(r"(?:^|(?<=\s))\|(?=\s|$)")    # a log viewer's or docker compose's column bar
_NOT_SERVER = ("llama_perf_", "llama_print_timings")   # llama-cli / llama-bench's own timing lines
_N = r"(-?\d+(?:\.\d+)?|-?nan|-?inf)"
_PROMPT = re.compile(r"prompt eval time =\s*" + _N + r" ms /\s*(\d+) tokens")
_EVAL = re.compile(r"^eval time =\s*" + _N + r" ms /\s*(\d+) tokens")
_TOTAL = re.compile(r"total time =\s*" + _N + r" ms /\s*(\d+) tokens")
_DRAFT = re.compile(r"draft acceptance( rate)? =\s*" + _N + r" \(\s*(\d+) accepted /\s*(\d+) generated\)")
_MEAN = re.compile(r", mean (acceptance length|len) =\s*" + _N)
_RATES = re.compile(r"(?:acceptance rate per position|acc per pos) = \(([^)]*)\)")
# the summary llama-speculative / -simple / lookup print at exit (LOG_INF / fprintf, no time on the lines)
_CLI_COUNT = re.compile(r"(n_draft|n_predict|n_drafted|n_accept)\s*=\s*(\d+)")
_CLI_ACCEPT = re.compile(r"accept\s*=\s*(-?\d+(?:\.\d+)?|-?nan|-?inf)%")
_CLI_SECONDS = re.compile(r"(encoded|decoded|generated)\s+(\d+) tokens in\s+(\d+(?:\.\d+)?) seconds, speed:")
_CLI_OTHER = re.compile(r"t_draft\s*=")          # lookup's drafting time, between n_drafted and n_accept
JSON_LINES_MAX = 10_000


def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def drafts_from(accepted: int, drafted: int, mean: float | None, rates: list[float]) -> tuple[int | None, bool]:
    """(num_drafts, exact) from a printed mean acceptance length (``%5.2f`` of 1 + accepted / steps)
    and rates per position (``%.3f`` of accepted at position i / steps).

    The steps n must print as the mean (|1 + accepted / n − mean| ≤ 0.005), lie in 1..drafted (a
    step drafts at least one token), and, with rates, give each position a whole count within
    0.0005·n of rate·n, the counts summing to accepted. When one n is left it is exact; else the
    nearest to accepted / (mean − 1) among those left, approximate. (None, False) without a mean
    or with 1.00 (nothing accepted: the steps are not in the line)."""
    if mean is None or mean - 1 <= 0 or accepted <= 0:
        return None, False
    low = max(1, math.ceil(accepted / (mean - 1 + 0.005) - 1e-9))
    high = drafted if mean - 1 - 0.005 <= 0 else min(drafted, math.floor(accepted / (mean - 1 - 0.005) + 1e-9))

    def fits(n: int) -> bool:
        if not rates:
            return True
        lows = [math.ceil(n * (r - 0.0005) - 1e-9) for r in rates]
        highs = [math.floor(n * (r + 0.0005) + 1e-9) for r in rates]
        return all(lo <= hi for lo, hi in zip(lows, highs)) and sum(lows) <= accepted <= sum(highs)

    left = [n for n in range(low, high + 1) if fits(n)] if high - low < 100_000 else []
    if len(left) == 1:
        return left[0], True
    guess = round_half_up(accepted / (mean - 1))
    if left:
        return min(left, key=lambda n: (abs(n - guess), n)), False
    return (guess if 0 < guess <= drafted else None), False


def _float(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def parse_draft(body: str) -> dict | None:
    """The fields of a ``draft acceptance`` text (from the label on), or None when it doesn't parse.
    Keys: rate, accepted, drafted, mean, rates, layout."""
    m = _DRAFT.match(body)
    if m is None:
        return None
    mean = _MEAN.search(body, m.end())
    rates = _RATES.search(body, m.end())
    try:
        rate = _float(m.group(2))
        mean_value = _float(mean.group(2)) if mean else None
        rate_values = [float(r) for r in rates.group(1).split(",")] if rates and rates.group(1).strip() else []
    except ValueError:
        return None
    if any(not math.isfinite(r) for r in rate_values):
        rate_values = []
    label = mean.group(1) if mean else None
    layout = ("mean acceptance length" if label == "acceptance length" else "mean len" if label == "len"
              else "rate" if m.group(1) else "acceptance")
    return {"rate": rate, "accepted": int(m.group(3)), "drafted": int(m.group(4)), "mean": mean_value,
            "rates": rate_values, "layout": layout}


def consistent(numbers: dict) -> bool:
    """accepted ≤ generated > 0, and the printed rate (%0.5f of a float) is accepted / generated."""
    drafted, accepted, rate = numbers["drafted"], numbers["accepted"], numbers["rate"]
    if drafted <= 0 or accepted > drafted:
        return False
    return rate is None or abs(rate - accepted / drafted) <= 1e-5


def _shipper_time(prefix: str) -> tuple[int | None, str | None]:
    """A log shipper's ISO-8601 timestamp in the text before llama.cpp's (epoch µs, UTC without offset)."""
    m = _ISO.search(prefix)
    if m is None:
        return None, None
    fraction = (m.group(3) or "")[:6]
    tz = m.group(4) or ""
    if tz == "Z":
        tz = "+00:00"
    elif tz and ":" not in tz:
        tz = tz[:3] + ":" + tz[3:]
    try:
        when = dt.datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}{'.' + fraction if fraction else ''}{tz}")
    except ValueError:
        return None, BAD_DATE
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return datetime_us(when), None


def _process(prefix: str) -> str:
    """The process prefix of a line: the text before llama.cpp's, without times, colours and a log
    viewer's `|` column separators."""
    key = _SEPARATOR.sub(" ", _LLAMA_TIME.sub("", _ISO.sub("", prefix)))
    return re.sub(r"\s+", " ", key).strip()


def _relative_time(prefix: str) -> int | None:
    """llama.cpp's own log time (``M.SS.mmm.uuu``, from the server's start) in the text before the
    message, in µs."""
    m = _LLAMA_TIME.search(prefix)
    if m is None:
        return None
    minutes, seconds, ms, us = (int(x) for x in m.group(0).split(" ")[0].split("."))
    return ((minutes * 60 + seconds) * 1000 + ms) * 1000 + us


@dataclass
class _Block:
    """The lines of one request's print_timing output read so far."""
    place: str                       # file:line of its first line
    slot: int | None = None
    task: int | None = None
    process: str = ""
    time: int | None = None          # the latest shipper time among its lines
    relative: int | None = None      # the latest llama.cpp relative time among its lines
    problem: str | None = None       # BAD_DATE on one of its lines
    prompt_ms: float | None = None
    eval_ms: float | None = None
    total_ms: float | None = None
    eval_tokens: int | None = None   # `eval time = … / N tokens`: the tokens the request generated
    seen: set = field(default_factory=set)


@dataclass
class _Response:
    """One JSON response with timings, ready for a requests row (and an intervals row if it drafted)."""
    place: str
    request_id: str
    model: str | None
    arrival: int
    first_token: int
    finish: int
    from_created: bool
    prompt_tokens: int
    output_tokens: int
    finish_reason: str
    stop_reason: str | None
    drafted: int | None
    accepted: int | None
    wrapper: dict


class _Import:
    def __init__(self, files: Sequence[str | Path], out: str | Path, deployment_id: str, overrides: Overrides,
                 start: str | None = None):
        self.files = [Path(p) for p in files]
        self.start = parse_time(start) if start is not None else None
        if start is not None and self.start is None:
            raise ImportInputError(f"--start: expected an ISO-8601 time (UTC without a zone) or epoch seconds, "
                                   f"found {start!r}")
        self.deployment_id = deployment_id
        self.overrides = overrides
        self.writer = TraceWriter(Path(out), SOURCE, self.files, options=f"deployment={deployment_id} {overrides}")
        self.writer.check_layout(("requests", "rounds", "intervals", "import_notes"))
        self.summary = ImportSummary(SOURCE, Path(out), quiet_reasons=frozenset({
            OTHER_LINE, NOT_PARSED, CONTRADICTS, NO_DRAFT_LINE, NO_CLOCK, BAD_DATE, JSON_BROKEN, NO_TIMINGS,
            STATS_UNDIFFERENCED, STATS_CONTRADICT, STATS_UNUSED,
            TIMINGS_INCOMPLETE, RESP_NO_TIME, NO_FINISH, NO_PROMPT, MULTI_CHOICE, REPEATED, PARTIAL}))
        self.where: dict[str, list[str]] = {}      # skip reason → first places
        self.intervals: dict[str, list] = {c: [] for c in INTERVAL_COLUMNS}
        self.draft_kinds: list[str] = []           # per intervals row: exact_drafts, approximate, unknown_drafts
        self.rates_of: list[list[float]] = []      # per intervals row: the printed rates per position
        # request id → [time, debug rounds [(drafted, accepted, new n_tokens)], trace rounds [(drafted,
        # accepted)], rolled back (a trace line said "restore checkpoint")]
        self.rounds: dict[str, list] = {}
        # request id → what its debug lines say: prompt tokens, (finish_reason, stop_reason), release n_tokens
        self.facts: dict[str, dict] = {}
        self.row_timing: dict[int, tuple] = {}     # intervals row → its block's (generated tokens, prompt_ms)
        self.anchors: list[tuple[str, int, str]] = []   # per file with relative times: file, anchor µs, how
        self.untimed_anchors: list[tuple[str, str, str, int]] = []   # per file: file, time, how, rows
        self.responses: list[_Response] = []
        self.layouts: Counter = Counter()
        self.counts: Counter = Counter()
        self.ids: set[str] = set()
        self.max_positions = 0
        # per file
        self.rows_in_file = 0
        self.first_problem: tuple[int, str, str] | None = None    # line, file:line, reason

    # -- bookkeeping

    def skip(self, reason: str, place: str, timing_like: bool = True) -> None:
        self.summary.skip(reason)
        places = self.where.setdefault(reason, [])
        if len(places) < 3:
            places.append(place)
        line = int(place.rsplit(":", 1)[1])
        if timing_like and (self.first_problem is None or line < self.first_problem[0]):
            self.first_problem = (line, place, reason)

    # -- reading

    def run(self) -> ImportSummary:
        for path in self.files:
            self.read(path)
        return self.write()

    def read(self, path: Path) -> None:
        fh = open_input(path)
        self.rows_in_file, self.first_problem = 0, None
        self.blocks: dict[tuple, _Block] = {}       # open blocks: (process, slot, task) or ("bare", process)
        self.headers: dict[str, tuple[int, int, int | None]] = {}   # process → slot, task, time of its header
        self.done: dict[tuple, int] = {}            # (process, slot, task) → index of its intervals row
        self.finish_reasons: dict[str, str] = {}    # stream id → the finish_reason of an earlier chunk
        self.relative_rows: list[int] = []          # intervals rows whose times are relative (µs from start)
        self.relative_rounds: list[str] = []        # requests of rounds whose time is relative
        self.last_relative: int | None = None       # the file's last llama.cpp relative time
        self.last_done: dict[str, tuple[tuple, int | None]] = {}   # process → its last request, intervals row
        self.counters: dict[tuple, tuple[int, int, int, int]] = {}  # (process, slot, drafter) → b, a, gen, acc
        self.stat_sums: dict[tuple, list[int]] = {}  # request → Σ Δ(steps, gen tokens, acc tokens)
        self.open_stats: dict[tuple, tuple] = {}    # request without a draft line → its block
        self.stats_rows: dict[tuple, int] = {}      # such a request → its intervals row
        self.untimed: list[list] = []               # [intervals row, seconds or None]: rows with no time of their own
        self.cli: dict | None = None                # the CLI summary being read: its place and counts
        self.cli_seconds: list[float] = []          # encoded/decoded/generated seconds not yet given to a summary
        self.cli_waiting: list | None = None        # the last summary, while it may take a `decoded` line after it
        self.json_lines: list[str] = []             # the lines of a pretty-printed JSON value so far
        self.json_start: tuple[Where, str] | None = None
        with fh:
            for number, raw in enumerate(fh, start=1):
                line = _ANSI.sub("", raw.rstrip("\r\n"))
                place = f"{path}:{number}"
                text = line.strip()
                if self.json_start is not None:
                    self.json_more(text, place)
                elif text.startswith(("{", "data:", "[{")) or text == "[":   # not `[53409] slot …` (llama-swap)
                    self.json_line(text, Where(path, number), place)
                elif not self.cli_line(text, place):
                    self.log_line(line, place)
        if self.json_start is not None:
            self.skip(JSON_UNFINISHED, self.json_start[1])
        for block in self.blocks.values():
            self.skip(NO_DRAFT_LINE, block.place)
        self.anchor(path)
        if not self.rows_in_file:
            looked = (f"the first line that looks like llama.cpp timing output but did not import is "
                      f"{self.first_problem[1]} ({self.first_problem[2]})" if self.first_problem else
                      "no line looks like llama.cpp timing output (print_timing lines, or JSON responses with a "
                      "timings object)")
            hint = ("; pass --start TIME or keep a wall-clock time on each line (docker logs -t)" if self.first_problem and self.first_problem[2] == NO_CLOCK else "")
            raise ImportInputError(f"{path}: nothing to import: {looked}{hint} "
                                   "(layouts: `specan import llamacpp-log --list-layouts`)")

    # -- log lines

    def log_line(self, line: str, place: str) -> None:
        line = _GLUED.sub("", line, count=1)
        label = _LABEL.search(line)
        slot = _SLOT.search(line)
        relative = _relative_time(line[:label.start()] if label else line[:slot.start()] if slot else line)
        if relative is not None:
            self.last_relative = relative
        if label is None and (fact := _REQUEST_FACT.search(line)) is not None:
            self.request_fact(line[:fact.start()], fact)
            return
        if label is None or any(marker in line for marker in _NOT_SERVER):
            if slot is not None and not line[slot.end():].strip():
                process = _process(line[:slot.start()])
                time, _ = _shipper_time(line[:slot.start()])
                self.headers[process] = (int(slot.group(1)), int(slot.group(2)), time, relative)
            else:
                self.summary.skip(OTHER_LINE)
            return
        if label.group(0).startswith("statistics"):
            self.stats_line(line, label.start(), relative, place)
            return
        if label.group(0).startswith("slot"):
            self.round_line(line, label.start(), relative, place)
            return
        prefixed = slot is not None and slot.end() <= label.start()
        prefix = line[:slot.start()] if prefixed else line[:label.start()]
        process = _process(prefix)
        time, problem = _shipper_time(prefix)
        body = line[label.start():]
        if prefixed:
            key = (process, int(slot.group(1)), int(slot.group(2)))
            ids = key[1:]
        else:
            # A header belongs to the bare lines right after it (one log message): used once, so a
            # later block without one never takes a stale slot and task.
            key = ("bare", process)
            header = self.headers.pop(process, None)
            ids = header[:2] if header else (None, None)
            time = time if time is not None else (header[2] if header else None)
            relative = relative if relative is not None else (header[3] if header else None)
        name = label.group(0)
        if name == "acc per pos =":
            self.rates_line(body, (process, *ids), place)
            return
        if name == "draft acceptance":
            self.draft_line(body, key, ids, process, time, relative, problem, place)
            return
        pattern = {"prompt eval time =": _PROMPT, "eval time =": _EVAL, "total time =": _TOTAL}[name]
        m = pattern.search(body)
        if m is None:
            self.skip(NOT_PARSED, place)
            return
        field_name = {"prompt eval time =": "prompt_ms", "eval time =": "eval_ms", "total time =": "total_ms"}[name]
        self.last_done.pop(process, None)
        block = self.blocks.get(key)
        if block is not None and (field_name in block.seen or name == "prompt eval time ="):
            self.skip(NO_DRAFT_LINE, block.place)    # the previous request ended without a draft line
            block = None
        if block is None:
            block = self.blocks[key] = _Block(place, *ids, process=process)
        block.seen.add(field_name)
        setattr(block, field_name, _float(m.group(1)))
        if field_name == "eval_ms":
            block.eval_tokens = int(m.group(2))
        block.time = time if time is not None else block.time
        block.relative = relative if relative is not None else block.relative
        block.problem = problem or block.problem

    def draft_line(self, body: str, key: tuple, ids: tuple, process: str, time: int | None, relative: int | None,
                   problem: str | None, place: str) -> None:
        numbers = parse_draft(body)
        self.last_done.pop(process, None)
        if numbers is None:
            self.skip(NOT_PARSED, place)
            return
        block = self.blocks.pop(key, None) or _Block(place, *ids, process=process)
        time = time if time is not None else block.time
        relative = relative if relative is not None else block.relative
        problem = problem or block.problem
        if not consistent(numbers):
            self.skip(CONTRADICTS, place)
            return
        untimed = time is None and relative is None
        if untimed and (problem or self.start is None):
            self.skip(problem or NO_CLOCK, place)
            return
        self.layouts[numbers["layout"]] += 1
        duration = block.total_ms if block.total_ms is not None else (
            block.prompt_ms + block.eval_ms if block.prompt_ms is not None and block.eval_ms is not None else None)
        n, exact = drafts_from(numbers["accepted"], numbers["drafted"], numbers["mean"], numbers["rates"])
        end = time if time is not None else relative if relative is not None else 0
        self.counts["no_start"] += duration is None and not untimed    # anchor_untimed counts its own
        self.add_interval(series=self.series(process, block, place),
                          start=end - ms_us(duration) if duration is not None else None, end=end,
                          drafts=n, exact=exact, drafted=numbers["drafted"], accepted=numbers["accepted"],
                          rates=numbers["rates"], source=LOG_SOURCE, mean=numbers["mean"])
        index = len(self.intervals["end_time"]) - 1
        if block.eval_tokens is not None:
            self.row_timing[index] = (block.eval_tokens, block.prompt_ms)
        if untimed:         # no time on any line of the block: --start anchors it, for its printed duration
            self.untimed.append([index, duration / 1000 if duration is not None else None])
        elif time is None:
            self.relative_rows.append(index)
        if block.slot is not None:
            self.done[(process, block.slot, block.task)] = index
        self.last_done[process] = ((process, block.slot, block.task, place), index)

    @staticmethod
    def series(process: str, block: _Block, place: str) -> str:
        return (f"{process} slot {block.slot} task {block.task}".strip() if block.slot is not None
                else f"{process} {place.rsplit('/', 1)[-1]}".strip())

    def stats_line(self, line: str, at: int, relative: int | None, place: str) -> None:
        """``statistics <drafter>: #calls(b,g,a) = …`` after a request's print_timing block: the slot's
        cumulative counters per drafter. The difference from the slot's previous line of the same drafter
        (or the counters themselves on the slot's first request, b = 1) is this request's: accept calls
        (a) are its verification steps, #gen tokens its drafted and #acc tokens its accepted tokens."""
        m = _STATS.match(line, at)
        if m is None:
            self.skip(NOT_PARSED, place)
            return
        # a current build's own tag before the message (`spec common_specu:`, its module and function
        # name cut to 12 characters) is not part of the process prefix the request's lines share
        prefix = _SPEC_TAG.sub("", line[:at])
        process = _process(prefix)
        drafter = m.group(1)
        begins, _, accepts, _, _, gen_tokens, acc_tokens = (int(x) for x in m.groups()[1:])
        open_key = next((k for k in reversed(list(self.blocks)) if self.blocks[k].process == process), None)
        if open_key is not None:       # a block that printed no draft acceptance line
            block = self.blocks.pop(open_key)
            request, index = (process, block.slot, block.task, block.place), None
            self.last_done[process] = (request, None)
            self.open_stats[request] = (block, relative, place)
        elif process in self.last_done:
            request, index = self.last_done[process]
        else:
            self.summary.skip(STATS_UNUSED)
            return
        slot_key = (process, request[1], drafter)
        previous = self.counters.get(slot_key)
        self.counters[slot_key] = (begins, accepts, gen_tokens, acc_tokens)
        if previous is not None and begins >= previous[0] and accepts >= previous[1]:
            delta = (accepts - previous[1], gen_tokens - previous[2], acc_tokens - previous[3])
        elif begins == 1:
            delta = (accepts, gen_tokens, acc_tokens)
        else:
            delta = None
        sums = self.stat_sums.setdefault(request, [0, 0, 0])
        if delta is None or sums[0] < 0:
            sums[0] = -1                       # one drafter's share unknown: the request's sums are too
        else:
            sums[:] = [x + d for x, d in zip(sums, delta)]
        if index is None:
            self.stats_interval(request, sums, place, time=_shipper_time(prefix)[0], relative=relative)
            return
        cols = self.intervals
        if sums[0] < 0:
            self.summary.skip(STATS_UNUSED)
            return
        if (sums[1], sums[2]) == (cols["num_draft_tokens"][index], cols["num_accepted_tokens"][index]):
            self.set_drafts(index, sums[0], "from_statistics")
            self.stat_sums[request] = [-2, 0, 0]   # settled: later drafters of the request add nothing
        elif sums[1] > cols["num_draft_tokens"][index]:
            self.skip(STATS_CONTRADICT, place)
            sums[0] = -1

    def set_drafts(self, index: int, steps: int, kind: str) -> None:
        cols = self.intervals
        rates = self.rates_of[index]
        cols["num_drafts"][index] = steps
        cols["accepted_per_position"][index] = [round_half_up(r * steps) for r in rates] if rates and steps else None
        self.draft_kinds[index] = kind

    def stats_interval(self, request: tuple, sums: list[int], place: str, time: int | None,
                       relative: int | None) -> None:
        """The intervals row of a block whose only speculative output is its statistics lines, written
        (or rewritten) with the sums so far."""
        block, first_relative, _ = self.open_stats[request]
        time = time if time is not None else block.time
        relative = relative if relative is not None else block.relative
        if sums[0] < 0:
            self.skip(STATS_UNDIFFERENCED, place)
            return
        untimed = time is None and relative is None
        if sums[1] <= 0 or (untimed and self.start is None):
            if sums[1] > 0:
                self.skip(NO_CLOCK, place)
            return
        existing = self.stats_rows.get(request)
        cols = self.intervals
        if existing is not None:
            cols["num_drafts"][existing] = sums[0]
            cols["num_draft_tokens"][existing] = sums[1]
            cols["num_accepted_tokens"][existing] = sums[2]
            return
        duration = block.total_ms if block.total_ms is not None else (
            block.prompt_ms + block.eval_ms if block.prompt_ms is not None and block.eval_ms is not None else None)
        end = time if time is not None else relative if relative is not None else 0
        self.counts["no_start"] += duration is None and not untimed    # anchor_untimed counts its own
        self.layouts["statistics only"] += 1
        self.add_interval(series=self.series(request[0], block, block.place),
                          start=end - ms_us(duration) if duration is not None else None, end=end,
                          drafts=sums[0], exact=True, drafted=sums[1], accepted=sums[2], rates=[],
                          source=LOG_SOURCE, mean=None)
        index = len(cols["end_time"]) - 1
        self.draft_kinds[index] = "from_statistics"
        self.stats_rows[request] = index
        if untimed:         # no time on any line of the block: --start anchors it, for its printed duration
            self.untimed.append([index, duration / 1000 if duration is not None else None])
        elif time is None:
            self.relative_rows.append(index)

    def request_fact(self, prefix: str, m: re.Match) -> None:
        request = f"{_process(prefix)} slot {m.group(1)} task {m.group(2)}".strip()
        facts = self.facts.setdefault(request, {})
        self.layouts["request line (`new prompt`, `stopped by`, release)"] += 1
        if m.group(3) is not None:
            facts["prompt_tokens"] = int(m.group(3))
        elif m.group(4) is not None:
            facts["finish"] = STOPPED.get(m.group(4), ("length", "length"))
        else:
            facts["released_n_tokens"] = int(m.group(5))

    def round_line(self, line: str, at: int, relative: int | None, place: str) -> None:
        """A per-round line of request ``slot S task T``, in the order printed: the debug one (``accepted
        A/D draft tokens, new n_tokens = N``) or the trace one (``accepted  A/ D draft tokens``)."""
        m = _ROUND.match(line, at)
        if m is None:
            self.skip(NOT_PARSED, place)
            return
        prefix = line[:at]
        slot, task, accepted, drafted = (int(x) for x in m.groups()[:4])
        n_tokens, restored = m.group(5), m.group(6) is not None
        if accepted > drafted:
            self.skip(CONTRADICTS, place)
            return
        process = _process(prefix)
        request = f"{process} slot {slot} task {task}".strip()
        time = _shipper_time(prefix)[0]
        entry = self.rounds.get(request)
        if entry is None:
            entry = self.rounds[request] = [time if time is not None else relative, [], [], False]
            if time is None and relative is not None:
                self.relative_rounds.append(request)
        if n_tokens is not None:
            entry[1].append((drafted, accepted, int(n_tokens)))
            self.layouts["per-round debug line"] += 1
        else:
            entry[2].append((drafted, accepted))
            entry[3] = entry[3] or restored
            self.layouts["per-round trace line"] += 1
        self.rows_in_file += 1

    def request_rounds(self) -> dict[str, list[tuple[int, int, int | None]]]:
        """Per request, its rounds as (drafted, accepted, context_len): the trace lines where the request
        printed them (every round), else the debug lines, completed by the round they skip (the one that
        ended the request) where the request's totals and exact number of verification steps give it.
        A request whose lines can't be made exact gives no rounds (counted in self.counts)."""
        totals = {}
        for index, series in enumerate(self.intervals["series"]):
            exact = self.draft_kinds[index] in ("exact_drafts", "from_statistics")
            totals[series] = (self.intervals["num_draft_tokens"][index], self.intervals["num_accepted_tokens"][index],
                              self.intervals["num_drafts"][index] if exact else None)
        out = {}
        for request, (_, debug, trace, restored) in self.rounds.items():
            contexts = [n - (a + 1) for _, a, n in debug]
            if trace:
                if restored:
                    self.counts["rounds_rolled_back"] += 1     # a replayed round is counted twice by its lines
                    continue
                if [(d, a) for d, a, _ in debug] != trace[:len(debug)]:
                    self.counts["rounds_lines_disagree"] += 1
                    continue
                steps = trace
            else:
                steps = [(d, a) for d, a, _ in debug]
                total = totals.get(request)
                sums = (sum(d for d, _ in steps), sum(a for _, a in steps))
                if total is not None and sums != total[:2]:
                    drafted, accepted = total[0] - sums[0], total[1] - sums[1]
                    if total[2] == len(steps) + 1 and 0 <= accepted <= drafted and drafted > 0:
                        steps = steps + [(drafted, accepted)]
                        self.counts["rounds_completed"] += 1
                    else:
                        self.counts["rounds_short"] += 1
                        continue
            if len(contexts) < len(steps):    # the round after the last debug line starts where it ended
                contexts.append(debug[-1][2] if debug and len(contexts) == len(steps) - 1 else None)
                contexts.extend([None] * (len(steps) - len(contexts)))
            out[request] = [(d, a, c) for (d, a), c in zip(steps, contexts)]
        return out

    def link_rounds(self, kept_rounds: dict[str, list]) -> tuple[dict[str, str], list[dict]]:
        """The requests the per-round lines belong to. A response of the same import with the same prompt
        and output tokens and the same drafted and accepted tokens is that request (the n-th such log
        request, in time order, is the n-th such response): its rounds take the response's id. Otherwise
        a requests row from the log: its print_timing block (times, generated tokens), its prompt length
        (the trace line `new prompt, … task.n_tokens = N`, else the release line's KV length less what it
        generated) and why it stopped (the debug `stopped by …` line; none printed is a stop string).
        → (log request id → the response id it is, requests rows from the log)."""
        cols = self.intervals
        row_of = {series: i for i, (series, source) in enumerate(zip(cols["series"], cols["source"]))
                  if source == LOG_SOURCE}
        candidates = []
        for request, steps in kept_rounds.items():
            index = row_of.get(request)
            if index is None or index not in self.row_timing or cols["start_time"][index] is None:
                self.counts["rounds_without_block"] += 1
                continue
            output_tokens, prompt_ms = self.row_timing[index]
            facts = self.facts.get(request, {})
            prompt_tokens = facts.get("prompt_tokens")
            if prompt_tokens is None and "released_n_tokens" in facts:
                prompt_tokens = facts["released_n_tokens"] - output_tokens + 1
            finish = facts.get("finish")
            if finish is None and self.rounds[request][1]:     # at debug verbosity: only a stop string is silent
                finish = ("stop", "stop_string")
            candidates.append(dict(request=request, start=cols["start_time"][index], end=cols["end_time"][index],
                                   prompt_ms=prompt_ms, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                                   finish=finish, drafted=cols["num_draft_tokens"][index],
                                   accepted=cols["num_accepted_tokens"][index]))
        waiting: dict[tuple, list[_Response]] = {}       # (prompt, output, drafted, accepted) → responses
        for r in sorted(self.responses, key=lambda r: r.arrival):
            waiting.setdefault((r.prompt_tokens, r.output_tokens, r.drafted, r.accepted), []).append(r)
        linked, rows = {}, []
        for c in sorted(candidates, key=lambda c: c["start"]):
            same = waiting.get((c["prompt_tokens"], c["output_tokens"], c["drafted"], c["accepted"]))
            if same:
                linked[c["request"]] = same.pop(0).request_id
            elif c["prompt_tokens"] is None or c["finish"] is None:
                self.counts["rounds_without_request"] += 1
            else:
                rows.append(c)
        return linked, rows

    def anchor(self, path: Path) -> None:
        """Relative times of this file → absolute: --start, else the file's modification time minus its
        last relative time (the log's last line was written when the file was last modified)."""
        self.anchor_untimed(path)
        if not self.relative_rows and not self.relative_rounds:
            return
        if self.start is not None:
            anchor, how = self.start, "--start"
        else:
            try:
                modified = int(round(path.stat().st_mtime * 1_000_000))
            except OSError:
                modified = None
            if modified is None:
                raise ImportInputError(f"{path}: llama.cpp's relative log times need --start TIME")
            anchor, how = modified - (self.last_relative or 0), "estimated"
        for index in self.relative_rows:
            for column in ("start_time", "end_time"):
                if self.intervals[column][index] is not None:
                    self.intervals[column][index] += anchor
        for request in self.relative_rounds:
            self.rounds[request][0] += anchor
        self.anchors.append((str(path), anchor, how))

    def modified(self, path: Path) -> int:
        try:
            return int(round(path.stat().st_mtime * 1_000_000))
        except OSError:
            raise ImportInputError(f"{path}: llama.cpp's relative log times need --start TIME") from None

    def anchor_untimed(self, path: Path) -> None:
        """Rows with no time at all (a CLI summary, a bare `timings` object): from --start for their
        duration, else ending at the file's modification time (the run ended when its output was saved)."""
        if not self.untimed:
            return
        cols = self.intervals
        end_at = None if self.start is not None else self.modified(path)
        for index, seconds in self.untimed:
            duration = ms_us(seconds * 1000) if seconds is not None else None
            if end_at is None:
                start, end = self.start, self.start + (duration or 0)
            else:
                start, end = (end_at - duration if duration is not None else None), end_at
            cols["start_time"][index], cols["end_time"][index] = (start if duration is not None else None), end
            self.counts["no_start"] += duration is None
        when = self.start if end_at is None else end_at
        self.untimed_anchors.append((str(path), dt.datetime.fromtimestamp(when / 1e6, dt.timezone.utc).isoformat(),
                                     "--start" if end_at is None else "estimated", len(self.untimed)))

    # -- llama-speculative / lookup summaries

    def cli_line(self, text: str, place: str) -> bool:
        """One line of the summary llama-speculative, -simple and lookup print at exit; True when it is one.
        The counts are the run's totals; its time is the `encoded`/`decoded` (2024 on) or `generated`
        (2023) lines printed before the counts, or the `decoded` line printed after them (2023-09)."""
        seconds = _CLI_SECONDS.match(text)
        if seconds is not None:
            kind, value = seconds.group(1), float(seconds.group(3))
            if self.cli_waiting is not None and kind != "encoded" and not self.cli_seconds:
                self.cli_waiting[1] = value       # printed after the summary it belongs to
                self.cli_waiting = None
            else:
                self.cli_waiting = None
                self.cli_seconds.append(value)
            self.summary.skip(OTHER_LINE)
            return True
        count = _CLI_COUNT.fullmatch(text)
        if count is not None:
            name, value = count.group(1), int(count.group(2))
            if name == "n_draft":
                self.cli, self.cli_waiting = {"place": place}, None
            if self.cli is None:
                return False
            self.cli[name] = value
            return True
        if self.cli is not None and _CLI_OTHER.match(text):
            self.summary.skip(OTHER_LINE)
            return True
        accept = _CLI_ACCEPT.fullmatch(text)
        if accept is None or self.cli is None:
            return False
        summary, self.cli = self.cli, None
        drafted, accepted = summary.get("n_drafted"), summary.get("n_accept")
        if drafted is None or accepted is None:
            self.skip(CLI_INCOMPLETE, place)
            return True
        if drafted == 0:
            self.skip(CLI_NOTHING_DRAFTED, place)
            return True
        rate = _float(accept.group(1))
        if accepted > drafted or rate is None or abs(rate - 100 * accepted / drafted) > 0.0005 + 1e-9:
            self.skip(CONTRADICTS, place)
            return True
        self.layouts["llama-speculative summary"] += 1
        self.add_interval(series=summary["place"].rsplit("/", 1)[-1], start=None, end=0, drafts=None, exact=False,
                          drafted=drafted, accepted=accepted, rates=[], source=LOG_SOURCE, mean=None)
        entry = [len(self.intervals["end_time"]) - 1, sum(self.cli_seconds) if self.cli_seconds else None]
        self.untimed.append(entry)
        self.cli_waiting = entry if not self.cli_seconds else None
        self.cli_seconds = []
        return True

    def rates_line(self, body: str, key: tuple, place: str) -> None:
        """``acc per pos = (…)`` (trace verbosity) right after a ``mean len`` line: that request's rates,
        which also narrow its num_drafts."""
        m = _RATES.search(body)
        index = self.done.pop(key, None)
        if m is None or index is None:
            self.summary.skip(OTHER_LINE)
            return
        try:
            rates = [float(r) for r in m.group(1).split(",")] if m.group(1).strip() else []
        except ValueError:
            self.skip(NOT_PARSED, place)
            return
        if not rates or not all(math.isfinite(r) for r in rates):
            return
        cols = self.intervals
        self.rates_of[index] = rates
        n, exact = drafts_from(cols["num_accepted_tokens"][index], cols["num_draft_tokens"][index],
                               cols["reported_accept_length"][index], rates)
        cols["num_drafts"][index] = n
        cols["accepted_per_position"][index] = [round_half_up(r * n) for r in rates] if n else None
        self.draft_kinds[index] = "exact_drafts" if exact else "approximate" if n is not None else "unknown_drafts"
        self.max_positions = max(self.max_positions, len(rates))

    def add_interval(self, *, series: str, start: int | None, end: int, drafts: int | None, exact: bool,
                     drafted: int, accepted: int, rates: list[float], source: str, mean: float | None) -> None:
        row = {"deployment_id": self.deployment_id, "series": series, "start_time": start, "end_time": end,
               "num_drafts": drafts, "num_draft_tokens": drafted, "num_accepted_tokens": accepted,
               "accepted_per_position": [round_half_up(r * drafts) for r in rates] if rates and drafts else None,
               "source": source, "reported_accept_length": mean,
               "reported_accept_length_definition": MEAN_DEFINITION if mean is not None else None}
        for column in INTERVAL_COLUMNS:
            self.intervals[column].append(row[column])
        self.draft_kinds.append("exact_drafts" if exact else "approximate" if drafts is not None else "unknown_drafts")
        self.rates_of.append(rates)
        self.max_positions = max(self.max_positions, len(rates))
        self.rows_in_file += 1

    # -- JSON lines

    def json_line(self, text: str, where: Where, place: str) -> None:
        payload = text[5:].strip() if text.startswith("data:") else text
        if payload == "[DONE]":
            self.summary.skip(OTHER_LINE)
            return
        try:
            value = json.loads(payload)
        except json.JSONDecodeError as err:
            if err.pos >= len(payload) and not text.startswith("data:"):
                self.json_lines, self.json_start = [payload], (where, place)   # pretty-printed: read on
            else:
                self.skip(JSON_BROKEN, place, timing_like="timings" in payload)
            return
        self.json_value(value, where, place)

    def json_more(self, text: str, place: str) -> None:
        """The next line of a pretty-printed JSON value (`jq` output): parsed once a closing line completes it."""
        self.json_lines.append(text)
        where, first = self.json_start
        if text.startswith(("}", "]")):
            try:
                value = json.loads("\n".join(self.json_lines))
            except json.JSONDecodeError as err:
                if err.pos < len("\n".join(self.json_lines)):
                    self.json_start, self.json_lines = None, []
                    self.skip(JSON_BROKEN, first)
                return
            self.json_start, self.json_lines = None, []
            self.json_value(value, where, first)
        elif len(self.json_lines) > JSON_LINES_MAX:
            self.json_start, self.json_lines = None, []
            self.skip(JSON_UNFINISHED, first)

    def json_value(self, value, where: Where, place: str) -> None:
        for obj in value if isinstance(value, list) else [value]:
            if not isinstance(obj, dict):
                self.skip(JSON_BROKEN, place, timing_like=False)
            elif "timings" not in obj and "response" not in obj and {"predicted_n", "prompt_ms"} <= obj.keys():
                self.bare_timings(obj, where, place)
            else:
                self.json_object(obj, where, place)

    def bare_timings(self, timings: dict, where: Where, place: str) -> None:
        """A `timings` object on its own (`jq .timings`): the request's drafted and accepted tokens and its
        duration (prompt_ms + predicted_ms), no id, time or finish reason: an intervals row, no requests row."""
        t = {key: get(timings, key, kind, where, f"timings.{key}") for key, kind in (
            ("prompt_ms", "number"), ("predicted_ms", "number"), ("draft_n", "integer"),
            ("draft_n_accepted", "integer"))}
        if t["prompt_ms"] is None or t["predicted_ms"] is None or any(v is not None and v < 0 for v in t.values()):
            self.skip(TIMINGS_INCOMPLETE, place)
            return
        if not t["draft_n"]:
            self.layouts["bare timings, no draft_n"] += 1
            self.summary.skip(NO_DRAFT_LINE)
            return
        if t["draft_n_accepted"] is None or t["draft_n_accepted"] > t["draft_n"]:
            self.skip(CONTRADICTS, place)
            return
        self.layouts["bare timings"] += 1
        self.add_interval(series=place.rsplit("/", 1)[-1], start=None, end=0, drafts=None, exact=False,
                          drafted=t["draft_n"], accepted=t["draft_n_accepted"], rates=[], source=RESPONSE_SOURCE,
                          mean=None)
        self.untimed.append([len(self.intervals["end_time"]) - 1, (t["prompt_ms"] + t["predicted_ms"]) / 1000])

    def json_object(self, obj: dict, where: Where, place: str) -> None:
        wrapper, resp = (obj, obj["response"]) if isinstance(obj.get("response"), dict) else (None, obj)
        choices = resp.get("choices") if isinstance(resp.get("choices"), list) else []
        reason = choices[0].get("finish_reason") if choices and isinstance(choices[0], dict) else None
        rid = resp.get("id") if isinstance(resp.get("id"), str) else None
        timings = resp.get("timings")
        if not isinstance(timings, dict):
            if rid is not None and isinstance(reason, str):
                self.finish_reasons[rid] = reason         # a stream's finish chunk before its usage chunk
            self.summary.skip(NO_TIMINGS)                 # expected (stream chunks): printed, not noted
            return
        if resp.get("stop") is False or (choices and reason is None and "usage" not in resp):
            self.summary.skip(PARTIAL)                    # expected: printed, not noted
            return
        if len(choices) > 1:
            self.skip(MULTI_CHOICE, place)
            return
        t = {key: get(timings, key, kind, where, f"timings.{key}") for key, kind in (
            ("prompt_n", "integer"), ("prompt_ms", "number"), ("predicted_n", "integer"),
            ("predicted_ms", "number"), ("cache_n", "integer"), ("draft_n", "integer"),
            ("draft_n_accepted", "integer"))}
        if (t["prompt_ms"] is None or t["predicted_n"] is None or t["predicted_ms"] is None
                or any(v is not None and v < 0 for v in t.values())):
            self.skip(TIMINGS_INCOMPLETE, place)
            return
        usage = get(resp, "usage", "object", where) or {}
        output_tokens = get(usage, "completion_tokens", "integer", where, "usage.completion_tokens")
        output_tokens = output_tokens if output_tokens is not None else (
            get(resp, "tokens_predicted", "integer", where))
        output_tokens = output_tokens if output_tokens is not None else t["predicted_n"]
        prompt_tokens = get(usage, "prompt_tokens", "integer", where, "usage.prompt_tokens")
        if prompt_tokens is None:
            prompt_tokens = get(resp, "tokens_evaluated", "integer", where)
        if prompt_tokens is None and t["cache_n"] is not None and t["prompt_n"] is not None:
            prompt_tokens = t["cache_n"] + t["prompt_n"]
        if prompt_tokens is None:
            self.skip(NO_PROMPT, place)
            return
        finish_reason, stop_reason = self.finish_of(resp, reason, rid, where)
        if finish_reason is None:
            self.skip(NO_FINISH, place)
            return
        times = self.times_of(wrapper, resp, t, where)
        if times is None:
            self.skip(RESP_NO_TIME, place)
            return
        request_id = rid if rid is not None else f"{where.path.name}:{where.line}"
        if request_id in self.ids:
            self.skip(REPEATED, place)
            return
        self.ids.add(request_id)
        drafted = t["draft_n"]
        accepted = t["draft_n_accepted"] if drafted is not None else None
        if drafted is not None and (accepted is None or accepted > drafted):
            self.skip(CONTRADICTS, place)
            return
        arrival, first, end, from_created = times
        self.responses.append(_Response(
            place, request_id, resp.get("model") if isinstance(resp.get("model"), str) else None,
            arrival, first, end, from_created, prompt_tokens, output_tokens, finish_reason, stop_reason,
            drafted if drafted else None, accepted if drafted else None,
            wrapper_values(wrapper, where) if wrapper is not None else {}))
        self.rows_in_file += 1
        if drafted:
            self.layouts["JSON timings"] += 1
            self.add_interval(series=request_id, start=arrival, end=end, drafts=None, exact=False, drafted=drafted,
                              accepted=accepted, rates=[], source=RESPONSE_SOURCE, mean=None)
        else:
            self.layouts["JSON timings, no draft_n"] += 1

    def finish_of(self, resp: dict, reason, rid: str | None, where: Where) -> tuple[str | None, str | None]:
        """(requests.finish_reason, the stopping round's stop_reason)."""
        stop_type = get(resp, "stop_type", "string", where)
        if stop_type is not None:     # the native /completion response
            return {"eos": ("stop", "eos"), "word": ("stop", "stop_string"),
                    "limit": ("length", "length")}.get(stop_type, (None, None))
        if reason is None and rid is not None:
            reason = self.finish_reasons.get(rid)
        finish_reason = FINISH_REASON.get(reason) if isinstance(reason, str) else None
        return finish_reason, STOP_REASON.get(finish_reason) if finish_reason else None

    @staticmethod
    def times_of(wrapper: dict | None, resp: dict, t: dict, where: Where) -> tuple[int, int, int, bool] | None:
        """(arrival, first token, finish, from created): from the wrapper's sent_at forward, else from
        ``created`` (the second llama.cpp built the response) back, with llama.cpp's own durations."""
        prompt, predicted = ms_us(t["prompt_ms"]), ms_us(t["predicted_ms"])
        if wrapper is not None and wrapper.get("sent_at") is not None:
            arrival = parse_time(wrapper["sent_at"])
            if arrival is None:
                raise where.fail(f"sent_at: expected ISO-8601 text or epoch seconds, found {wrapper['sent_at']!r}")
            return arrival, arrival + prompt, arrival + prompt + predicted, False
        created = resp.get("created")
        if is_number(created) and math.isfinite(created):
            end = epoch_us(created)
            return end - predicted - prompt, end - predicted, end, True
        return None

    # -- writing

    def write(self) -> ImportSummary:
        summary, dep = self.summary, self.deployment_id
        kept_rounds = self.request_rounds()
        drafted = bool(self.intervals["end_time"]) or any(
            d for _, debug, trace, _ in self.rounds.values() for d, *_ in debug + trace)
        models = Counter(r.model for r in self.responses if r.model)
        row = deployment_row(dep, self.overrides, model=models.most_common(1)[0][0] if models else None,
                             speculated=drafted, num_spec_tokens=self.max_positions or None)
        merged = self.writer.merge_deployment(row, summary)
        plain = not drafted and merged.method == "none"
        existing = self.writer.existing_request_ids(dep)
        requests, rounds = RequestsBuffer(), RoundsBuffer()
        for r in self.responses:
            self.counts["not_drafted"] += drafted and r.drafted is None
            self.counts["already_present"] += r.request_id in existing
            self.counts["from_created" if r.from_created else "from_sent_at"] += 1
            requests.add(deployment_id=dep, request_id=r.request_id, arrival_time=r.arrival,
                         first_token_time=r.first_token, finish_time=r.finish, prompt_tokens=r.prompt_tokens,
                         output_tokens=r.output_tokens, finish_reason=r.finish_reason, **r.wrapper)
            if plain:
                rounds.add(dep, r.request_id, reconcile([], r.output_tokens).rounds, r.stop_reason, r.arrival)
        context: list[int] | None = None
        if self.rounds and not plain:
            context = []
            linked, log_requests = self.link_rounds(kept_rounds)
            for c in log_requests:
                first = c["start"] + ms_us(c["prompt_ms"]) if c["prompt_ms"] is not None else None
                requests.add(deployment_id=dep, request_id=c["request"], arrival_time=c["start"],
                             first_token_time=first, finish_time=c["end"], prompt_tokens=c["prompt_tokens"],
                             output_tokens=c["output_tokens"], finish_reason=c["finish"][0])
            stops = {c["request"]: c["finish"][1] for c in log_requests}
            stops.update((log_id, next(r.stop_reason for r in self.responses if r.request_id == rid))
                         for log_id, rid in linked.items())
            arrivals = {r.request_id: r.arrival for r in self.responses}
            arrivals.update((c["request"], c["start"]) for c in log_requests)
            for request, steps in kept_rounds.items():
                rid = linked.get(request, request)
                # without a requests row (counted in rounds_without_block / _request) the rounds are still
                # written: the loader keeps them while the traces have no requests table, and rejects them as
                # unknown_request once a requests table (another import's) lacks their request
                rounds.add(dep, rid, [(d, a, a + 1) for d, a, _ in steps], stops.get(request),
                           arrivals.get(rid, self.rounds[request][0]))
                context.extend(c for _, _, c in steps)
            self.counts["rounds_linked"] += len(linked)
            self.counts["log_requests"] += len(log_requests)
        self.notes(plain, merged.method, bool(self.responses), kept_rounds)
        if len(requests):
            self.writer.add("requests", requests.cols, times=requests.cols["arrival_time"],
                            drop_empty_optional=OPTIONAL_REQUEST_COLUMNS)
        if len(rounds):
            columns = dict(rounds.cols, **({"context_len": context} if context is not None else {}))
            self.writer.add("rounds", columns, times=rounds.times)
        if self.intervals["end_time"]:
            self.writer.add("intervals", self.intervals, times=self.intervals["end_time"],
                            drop_empty_optional=("reported_accept_length", "reported_accept_length_definition"))
        return finish(self.writer, summary, dep)

    def notes(self, plain: bool, method: str, responses: bool, kept_rounds: dict[str, list]) -> None:
        note = lambda text: self.summary.note(text, self.deployment_id)  # noqa: E731
        plural = lambda n, word: f"{n} {word}{'s' if n != 1 else ''}"  # noqa: E731
        c = self.counts + Counter(self.draft_kinds) + Counter({"statistics only": self.layouts["statistics only"]})
        summaries = self.layouts["llama-speculative summary"]
        intervals = len(self.intervals["end_time"]) - summaries
        note("layouts read: " + ", ".join(f"{name} ({n})" for name, n in sorted(self.layouts.items())))
        if sum(s == LOG_SOURCE for s in self.intervals["source"]) > summaries or self.rounds:
            note("log times are the log shipper's timestamp on each line where it has one (UTC when it has no "
                 "offset); else llama.cpp's own log time (`M.SS.mmm.uuu`, from the server's start) plus the "
                 "server's start time")
        for path, anchor, how in self.anchors:
            when = dt.datetime.fromtimestamp(anchor / 1e6, dt.timezone.utc).isoformat()
            if how == "estimated":
                note(f"{path}: absolute times are estimated: the server's start is taken to be the file's "
                     f"modification time minus its last llama.cpp log time, {when}; pass --start TIME to set it")
            else:
                note(f"{path}: llama.cpp's log times count from --start {when}")
        for path, when, how, n in self.untimed_anchors:
            rows_text = plural(n, "interval")
            if how == "--start":
                note(f"{path}: {rows_text} without a time of their own (llama-speculative / lookup summaries, bare "
                     f"`timings` objects, timing blocks without a log time) start at --start {when} and last their printed seconds (encoded + "
                     "decoded, or generated; prompt_ms + predicted_ms)")
            else:
                note(f"{path}: {rows_text} without a time of their own (llama-speculative / lookup summaries, bare "
                     f"`timings` objects): times are estimated: they end at the file's modification time {when} "
                     "and start their printed seconds before it; pass --start TIME to set the start")
        if summaries:
            note(f"llama-speculative / lookup summaries ({summaries}): one intervals row each (series: the file and line of its `n_draft` line), num_draft_tokens = n_drafted, "
                 "num_accepted_tokens = n_accept; num_drafts unknown (the summary does not print the number of "
                 "verification steps); n_draft (the maximum draft length, or the adaptive one's last value) and "
                 "n_predict are not used")
        if c["from_statistics"]:
            note(f"num_drafts from the `statistics` lines on {plural(c['from_statistics'], 'interval')}: the "
                 "slot's cumulative accept calls (#calls a) differenced per request, summed over drafters (exact; "
                 "checked against the request's drafted and accepted tokens where it printed a draft acceptance "
                 "line)")
        if c["statistics only"]:
            note(f"{plural(c['statistics only'], 'request')} without a draft acceptance line: drafted, accepted "
                 "and num_drafts from the `statistics` lines alone (#gen tokens, #acc tokens, #calls a, "
                 "differenced)")
        if kept_rounds:
            n_rounds = sum(len(steps) for steps in kept_rounds.values())
            note(f"{plural(n_rounds, 'round')} of {plural(len(kept_rounds), 'request')} from llama.cpp's per-round "
                 "lines, in the order printed: the trace lines (`accepted A/ D draft tokens`, LLAMA_TRACE set) where "
                 "a request has them, else the debug lines (`accepted A/D draft tokens, new n_tokens = N`); "
                 "num_committed_tokens = A + 1, context_len = N − (A + 1); a round the log does not print (no draft) "
                 "is missing")
        if c["rounds_linked"]:
            note(f"{plural(c['rounds_linked'], 'request')} of the log are responses of this import (the same prompt, "
                 "output, drafted and accepted tokens; the n-th such log request in time order is the n-th such "
                 "response): their rounds carry the response's id")
        if c["log_requests"]:
            note(f"{plural(c['log_requests'], 'requests row')} from the log (request_id `slot S task T`): arrival = "
                 "the print_timing block's end − total time, first token = arrival + prompt eval time, finish = the "
                 "block's end; output_tokens = the eval line's tokens; prompt_tokens = the trace line's task.n_tokens, "
                 "else the release line's n_tokens − output_tokens + 1; finish_reason from the debug `stopped by …` "
                 "line (EOS: stop; a limit: length; none printed: a stop string)")
        if c["rounds_without_block"] or c["rounds_without_request"]:
            n = c["rounds_without_block"] + c["rounds_without_request"]
            note(f"{plural(n, 'request')} with per-round lines but no requests row (no print_timing block with its "
                 "times, or no prompt length or stop reason in the log, and no matching response in this import): "
                 "their rounds are written. The loader keeps them while the traces have no requests table, and "
                 "rejects them (unknown_request) once a requests table, another import's, lacks their request; "
                 "import the log together with the responses, or a whole debug log, to give them requests rows")
        if c["rounds_completed"]:
            note(f"{plural(c['rounds_completed'], 'request')}: the debug lines miss the round that ended the request "
                 "(llama.cpp returns before printing it); that round is the request's drafted and accepted tokens "
                 "(draft acceptance line) less its printed rounds, as its verification steps are one more than them")
        if c["rounds_short"]:
            note(f"{plural(c['rounds_short'], 'request')} whose debug per-round lines do not add up to the request's "
                 "draft acceptance line, and the difference is not one round: no rounds from them (their intervals "
                 "row stays); run with LLAMA_TRACE=1 to print every round")
        if c["rounds_lines_disagree"]:
            note(f"{plural(c['rounds_lines_disagree'], 'request')} whose trace and debug per-round lines disagree: "
                 "no rounds from them (their intervals row stays)")
        if c["rounds_rolled_back"]:
            note(f"{plural(c['rounds_rolled_back'], 'request')} with a rolled-back round (`restore checkpoint`): "
                 "its replay prints the replayed tokens as accepted again, so no rounds from them (their intervals "
                 "row stays)")
        if intervals:
            note(f"{plural(intervals, 'request')} that drafted: one intervals row each, its own series (`slot S task "
                 "T`, or the response id), with the request's drafted and accepted tokens exactly; start_time = "
                 "end_time − llama.cpp's total time (prompt eval + eval)")
        if c["exact_drafts"]:
            note(f"num_drafts is exact on {plural(c['exact_drafts'], 'interval')}: the only whole number of "
                 "verification steps that the printed mean acceptance length (2 decimals) and rates per position "
                 "(3 decimals) allow")
        if c["approximate"]:
            note(f"num_drafts is approximate on {plural(c['approximate'], 'interval')}: of the step counts the printed "
                 "mean (2 decimals) and rates allow, the nearest to accepted / (mean acceptance length − 1)")
        if c["exact_drafts"] or c["approximate"]:
            note("accepted_per_position = round(rate × num_drafts), where llama.cpp printed rates per position")
        if c["unknown_drafts"]:
            note(f"num_drafts unknown on {plural(c['unknown_drafts'], 'interval')} (no mean acceptance length: "
                 "llama.cpp before 2026-06 and the JSON timings don't give it, and 1.00 means nothing accepted)")
        if c["no_start"]:
            note(f"{plural(c['no_start'], 'interval')} without start_time: no total time line read for the request")
        if c["from_sent_at"]:
            note(f"{plural(c['from_sent_at'], 'request')}: first_token_time = sent_at + prompt_ms, finish_time = "
                 "first_token_time + predicted_ms. The wait for a free slot is not in llama.cpp's timings, so TTFT and "
                 "end-to-end latency are lower bounds; TPOT is exact")
        if c["from_created"]:
            note(f"{plural(c['from_created'], 'request')} without sent_at: finish_time = created (the whole second in "
                 "which llama.cpp built the response; the true finish is up to 1 s later), first_token_time = "
                 "finish_time − predicted_ms, arrival_time = first_token_time − prompt_ms (without the wait for a "
                 "free slot)")
        if plain:
            note("no request drafted: plain decoding (method none), output_tokens − 1 rounds of one token per "
                 "response; llama.cpp builds before 2025-03 (PR #12603) never report draft_n, so pass --method if "
                 "that server speculated")
        elif responses and not intervals:
            note(f"no response reports draft_n, but the method is {method!r}: no rounds written (llama.cpp leaves "
                 "draft_n out when a request drafted nothing, and builds before 2025-03 never report it). This "
                 "import adds neither rounds nor intervals")
        if c["not_drafted"]:
            note(f"{plural(c['not_drafted'], 'response')} without draft_n (the request drafted nothing): a requests "
                 "row, no intervals row")
        if c["already_present"]:
            note(f"{plural(c['already_present'], 'request id')} already in TRACES were imported again; the loader "
                 "will reject every copy as duplicate_key")
        for reason, places in sorted(self.where.items()):
            if reason in self.summary.skipped:
                n = self.summary.skipped[reason]
                note(f"{plural(n, 'line')} skipped ({reason}), first at {', '.join(places)}")


def import_llamacpp_log(files: Sequence[str | Path], out: str | Path, deployment_id: str,
                        overrides: Overrides | None = None, start: str | None = None) -> ImportSummary:
    """Import llama.cpp server logs and/or JSON responses into TRACES ``out`` under ``deployment_id``.
    ``start``: the absolute time llama.cpp's relative log times count from (ISO-8601)."""
    return _Import(files, out, deployment_id, overrides or Overrides(), start=start).run()
