"""`specan import vllm-log`: vLLM's periodic speculative-decoding log line → intervals.

vLLM has printed this line in six layouts since 2024 (docs/importers.md has the
table, tests/fixtures/vllm_logs/ real samples of each). Every field is parsed
where it is present, by its label, so a layout is a set of fields, not a regex:

1. V0 (0.5–0.7), counters **cumulative** since the engine started::

       Speculative metrics: Draft acceptance rate: 0.642, System efficiency: 0.598,
       Number of speculative tokens: 3, Number of accepted tokens: N,
       Number of draft tokens: N, Number of emitted tokens: N.

   (0.5.x: ``Number of draft tokens tokens:``, ``Number of emitted tokens tokens:``.)
   An interval is the difference of consecutive lines of one series; a decrease
   is a restart. A series' first line is an interval of its own, from the engine's
   start (its time unknown: no start_time), so a one-line paste imports too. V0's "accepted" counts matching positions even after the first
   rejection, so the accepted prefix is taken from emitted tokens: each step
   emits its accepted prefix plus one token, and steps = draft tokens / k.
2. V1, April 2025: ``Speculative metrics: Draft acceptance rate: 1.000,
   Number of accepted tokens: 66, Number of draft tokens: 66,`` (per interval).
3. V1 0.8: ``SpecDecoding metrics: Draft acceptance rate: 100.0%, Accepted: 66
   tokens, Drafted: 66 tokens``: no mean length, so num_drafts is unknown.
4. V1 0.9–0.10: adds ``Mean acceptance length: 2.16`` and ``Per-position
   acceptance rate: 0.543, 0.357, 0.264``.
5. V1 from 2025-09: adds ``Accepted throughput`` and ``Drafted throughput``.
6. Newest: the mean length first, ``Avg Draft acceptance rate: X%`` last.

From layout 2 on, vLLM resets its counters when it logs, so a line is one
interval, from the previous line of the same series. With a mean acceptance
length and k per-position rates, num_drafts = Drafted / k (every step drafted
k tokens) where that agrees with the mean, which it always does when nothing
was accepted (mean 1.00, zero per-position counts); else num_drafts =
round(accepted / (mean − 1)) is approximate (the mean has 2 decimals) and says
so in a note. The printed rates are checked against the counts (acceptance
rate = accepted / drafted, Σ per-position rates = mean − 1, the throughputs'
ratio = accepted / drafted, V0's efficiency), each within its printed
rounding; a line whose fields disagree is imported and named in a note.

A **series** is one engine: the line's process prefix (``(APIServer pid=1)``,
a docker compose service name) and, with data parallelism, the ``Engine 00N``
of the load line that precedes the spec line in that process. Intervals never
chain across series. The load line (``Running: N reqs, Waiting: N reqs, GPU KV
cache usage: X%``, V0 ``Pending:``) gives each interval its load.

**Logging ticks.** vLLM prints the load line and then the spec line from one
call, once per logging tick (10 s by default), and averages the generation
throughput since its previous tick. It prints no spec line for a tick without
drafts, and no line at all for a tick that, like the tick before it, had zero
prompt and generation throughput. So an interval runs from the previous printed
tick of its series (load or spec line) when that tick was busy (non-zero
throughput, or drafts), and has no start after an idle-looking one: vLLM may have
skipped ticks since, and the window its throughput covers is unknown. From
layout 2 on the spec counts cover that same window (vLLM resets them whenever it
logs, and they stay zero through ticks without drafts); V0's differences run from
the previous spec line as before.

**Baseline logs.** A log with no spec line at all is a deployment that does
not speculate: each load line with a time becomes an interval (its load and
generation throughput, no counts), method ``none`` unless ``--method`` says
otherwise. In a log with spec lines a load line is its tick's spec interval's
load, never an interval of its own: a load line with no spec line at its tick
(nothing drafted, or the excerpt lost the line) is counted and left out.

**Iteration lines.** With ``--enable-logging-iteration-details`` vLLM prints one
``Iteration(N): … context requests, …`` line per engine iteration: each becomes a row of
``steps`` (module vllm_iterations has the layouts and the token counts). A log may hold them
alone or beside spec lines; the spec lines are then also the windows whose acceptance rate
gives the steps' accepted tokens.

Times come from the vLLM prefix ``INFO MM-DD HH:MM:SS``, which has no year
(``--year``) and no time zone (read as UTC); a leading ISO timestamp that a log
shipper added is only used when the vLLM prefix is missing. A line with neither
(the message alone, as pasted in a PR) has no time: ``--start TIME`` anchors such
lines, the first tick of a series at TIME and each later one a logging interval
on (vLLM's defaults: 5 s for V0, ``_LOCAL_LOGGING_INTERVAL_SEC``; 10 s for V1,
``VLLM_LOG_STATS_INTERVAL``), with a note that these times are assumed.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .vllm_iterations import Iteration, estimate_window, find_marker, parse_iteration
from .vllm_iterations import engine_of as iteration_engine
from .common import (ImportInputError, ImportSummary, Overrides, TraceWriter, datetime_us, deployment_row,
                     finish, ms_us, open_input, parse_time)

SOURCE = "vllm-log"
INTERVAL_SOURCE = "vllm_log"

OTHER_LINE = "not a speculative-decoding metrics line"
NOT_PARSED = "metrics line that does not parse"
NO_TIME = "metrics line without a date and time"
DAY_US = 86_400_000_000   # a first date less than a day ahead is a time zone, not last year
NO_TIME_HINT = "no date and time in the line (pass --start TIME to anchor lines without one)"
# vLLM's default logging intervals, µs: V0 `_LOCAL_LOGGING_INTERVAL_SEC`, V1 `VLLM_LOG_STATS_INTERVAL`
TICK_V0_US = 5_000_000
TICK_V1_US = 10_000_000
BAD_DATE = "metrics line with an impossible date"
LOAD_NO_TIME = "load line without a date and time"
ITER_NOT_PARSED = "iteration line whose numbers do not parse"
ITER_NO_TIME = "iteration line without a date and time (pass --start TIME to anchor lines without one)"
ITER_BAD_DATE = "iteration line with an impossible date"
ITER_DUMMY = "dummy iteration (`(dummy)`: a data-parallel rank's padding step, no requests)"
ITER_EMPTY = "iteration with zero generation and zero context tokens"
STEP_COLUMNS = ("deployment_id", "step_id", "start_time", "duration_ms", "batch_size", "num_prefill_tokens",
                "kv_usage", "num_draft_tokens", "num_accepted_tokens", "num_committed_tokens", "counts_from")
LOAD_ALONE = ("load line with no spec line at its tick (nothing drafted, or the line is missing): a speculative "
              "log's intervals are its spec lines")

LAYOUTS = ("V0 `Speculative metrics: … Number of emitted tokens` (0.5–0.7, cumulative)",
           "V1 `Speculative metrics: Draft acceptance rate, Number of accepted/draft tokens` (2025-04)",
           "`SpecDecoding metrics: Draft acceptance rate: X%, Accepted: N tokens, Drafted: N tokens` (0.8)",
           "… with `Mean acceptance length` and `Per-position acceptance rate` (0.9–0.10)",
           "… with `Accepted throughput` / `Drafted throughput` (2025-09)",
           "`SpecDecoding metrics: Mean acceptance length …, Avg Draft acceptance rate: X%` (newest)")

INTERVAL_COLUMNS = ("deployment_id", "series", "start_time", "end_time", "num_drafts", "num_draft_tokens",
                    "num_accepted_tokens", "accepted_per_position", "source")
LOAD_COLUMNS = ("running_requests", "waiting_requests", "generation_tokens_per_s", "kv_cache_usage",
                "reported_accept_length", "reported_accept_length_definition")

MEAN_DEFINITION = "1 + accepted / drafts, as vLLM prints it (2 decimals)"

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_LEVEL = re.compile(r"(?:^|[\s)\]|])(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+"
                    r"(\d{2})-(\d{2})\s+(\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?")
_ISO = re.compile(r"^\s*(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?\s*")
_MARKER = re.compile(r"(SpecDecoding metrics|Speculative metrics):")
_NUM = r"(nan|-?\d+(?:\.\d+)?)"
_FIELDS = {
    "avg_rate": re.compile(r"Avg Draft acceptance rate: " + _NUM + "%"),
    "rate": re.compile(r"(?<!Avg )Draft acceptance rate: " + _NUM + r"(%?)"),
    "efficiency": re.compile(r"System efficiency: " + _NUM),
    "k": re.compile(r"Number of speculative tokens: (\d+)"),
    "accepted_v0": re.compile(r"Number of accepted tokens: (\d+)"),
    "drafted_v0": re.compile(r"Number of draft tokens(?: tokens)?: (\d+)"),
    "emitted": re.compile(r"Number of emitted tokens(?: tokens)?: (\d+)"),
    "mean": re.compile(r"Mean acceptance length: " + _NUM),
    "accepted": re.compile(r"Accepted: (\d+) tokens"),
    "drafted": re.compile(r"Drafted: (\d+) tokens"),
    "rates": re.compile(r"Per-position acceptance rate: (" + _NUM + r"(?:, " + _NUM + r")*)"),
    "accepted_per_s": re.compile(r"Accepted throughput: " + _NUM + " tokens/s"),
    "drafted_per_s": re.compile(r"Drafted throughput: " + _NUM + " tokens/s"),
}
_HALF = {1: 0.05, 2: 0.005, 3: 0.0005}       # half the last printed digit, by decimals printed
_EPS = 1e-9
_ENGINE = re.compile(r"Engine (\d+):")
_ENGINE_NAME = re.compile(r"Engine (\d+)")
# where a load line's message starts, after vLLM's prefix
_LOAD_START = re.compile(r"Engine \d+:|\d+ Engines Aggregated:|Avg prompt throughput:|Avg generation throughput:"
                         r"|GPU KV cache usage:")
_LOAD = {
    "prompt_tokens_per_s": re.compile(r"Avg prompt throughput: " + _NUM + " tokens/s"),
    "running_requests": re.compile(r"Running: (\d+) reqs"),
    "waiting_requests": re.compile(r"(?:Waiting|Pending): (\d+) reqs"),
    "generation_tokens_per_s": re.compile(r"Avg generation throughput: " + _NUM + " tokens/s"),
    "kv_cache_usage": re.compile(r"GPU KV cache usage: " + _NUM + "%"),
}


def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def parse_metrics(text: str) -> dict | None:
    """The fields of one metrics message (the text from its marker on), or None when it
    carries no counts. Keys: layout, accepted, drafted, mean, rates, k, emitted, and
    ``printed``: the printed ratios the counts can be checked against (see disagreements)."""
    marker = _MARKER.search(text)
    if marker is None:
        return None
    found = {name: pattern.search(text, marker.end()) for name, pattern in _FIELDS.items()}
    get = lambda name: found[name].group(1) if found[name] else None  # noqa: E731
    try:
        rates = ([float(r) for r in get("rates").split(", ")] if get("rates") else [])
        mean = _float(get("mean"))
    except ValueError:
        return None
    if any(not math.isfinite(r) for r in rates):
        rates = []
    printed = {name: (_float(get(name)), _decimals(get(name)))
               for name in ("rate", "avg_rate", "efficiency", "accepted_per_s", "drafted_per_s")
               if get(name) is not None and _float(get(name)) is not None}
    if "rate" in printed and found["rate"].group(2) == "%":
        printed["rate_percent"] = printed.pop("rate")
    if rates:
        printed["rates"] = (sum(rates), _decimals(get("rates").split(", ")[0]))
    if marker.group(1) == "Speculative metrics":
        if get("accepted_v0") is None or get("drafted_v0") is None:
            return None
        cumulative = get("emitted") is not None or get("efficiency") is not None or get("k") is not None
        return {"layout": "v0" if cumulative else "v1-2025-04", "cumulative": cumulative,
                "accepted": int(get("accepted_v0")), "drafted": int(get("drafted_v0")),
                "emitted": int(get("emitted")) if get("emitted") else None,
                "k": int(get("k")) if get("k") else None, "mean": None, "rates": [], "printed": printed}
    if get("accepted") is None or get("drafted") is None:
        return None
    layout = ("newest" if found["avg_rate"] else "2025-09" if "Accepted throughput" in text
              else "0.9" if mean is not None or rates else "0.8")
    return {"layout": layout, "cumulative": False, "accepted": int(get("accepted")), "drafted": int(get("drafted")),
            "emitted": None, "k": None, "mean": mean, "rates": rates, "printed": printed}


def _decimals(text: str) -> int:
    return len(text.partition(".")[2])


def _agrees(printed: tuple[float, int], exact: float, terms: int = 1) -> bool:
    """Whether a printed value is ``exact`` rounded to its decimals (``terms`` printed values summed)."""
    value, decimals = printed
    return abs(value - exact) <= terms * _HALF.get(decimals, 0.5) + _EPS


def disagreements(numbers: dict, num_drafts: int | None = None) -> list[str]:
    """The printed ratios of a metrics line that its own counts contradict, beyond the printed rounding:
    the acceptance rate (accepted / drafted), the throughputs' ratio (both over the same seconds), the
    per-position rates (they sum to accepted / num_drafts) and V0's efficiency (emitted / (steps · (k + 1)))."""
    accepted, drafted, printed = numbers["accepted"], numbers["drafted"], numbers["printed"]
    wrong = []
    if drafted:
        ratio = accepted / drafted
        for name, scale in (("rate", 1), ("rate_percent", 100), ("avg_rate", 100)):
            if name in printed and not _agrees(printed[name], ratio * scale):
                wrong.append("avg_rate" if name == "avg_rate" else "rate")
        if "accepted_per_s" in printed and "drafted_per_s" in printed and printed["drafted_per_s"][0] > 0:
            per_s = printed["drafted_per_s"][0] * ratio    # what the accepted throughput must print
            if not _agrees(printed["accepted_per_s"], per_s, terms=1 + ratio):
                wrong.append("throughputs")
        k, emitted = numbers["k"], numbers["emitted"]
        if "efficiency" in printed and k and emitted is not None and drafted % k == 0:
            if not _agrees(printed["efficiency"], emitted / (drafted // k * (k + 1))):
                wrong.append("efficiency")
    if num_drafts and "rates" in printed:
        if not _agrees(printed["rates"], accepted / num_drafts, terms=len(numbers["rates"])):
            wrong.append("per-position rates")
    return wrong


def num_drafts_from(accepted: int, mean: float | None, drafted: int | None = None,
                    k: int | None = None) -> tuple[int | None, str | None]:
    """(num_drafts, how): ``fixed_k`` when drafted / k (every step drafted k tokens) agrees
    with the printed mean, else ``approximate``, round(Accepted / (mean − 1)), kept within
    what the drafted tokens allow; (None, None) when neither can be known. With nothing accepted
    (mean 1.00) only drafted / k is left, and its per-position counts are zeros."""
    if mean is None or not math.isfinite(mean):
        return None, None
    if k and drafted and drafted % k == 0:
        n = drafted // k
        if abs((1 + accepted / n) - mean) <= 0.005 + 1e-9:     # the mean is printed to 2 decimals
            return n, "fixed_k"
    if mean - 1 <= 0:
        return None, None
    n = round_half_up(accepted / (mean - 1))
    if drafted:
        n = min(n, drafted)                     # every draft step drafts at least one token
        if k:
            n = max(n, -(-drafted // k))        # … and at most k
    return (n, "approximate") if n > 0 else (None, None)


def parse_load(text: str) -> dict:
    """Running and waiting requests, generation throughput and KV usage of a load line."""
    load = {}
    for name, pattern in _LOAD.items():
        m = pattern.search(text)
        if m:
            load[name] = int(m.group(1)) if name.endswith("requests") else _float(m.group(1))
    if load.get("kv_cache_usage") is not None:
        load["kv_cache_usage"] /= 100
    return load


@dataclass
class _Series:
    """What one engine's lines leave for its next line."""
    previous_end: int | None = None      # the previous spec line (V0 differences run from it)
    previous_month: int | None = None
    year: int = 0
    cumulative: dict | None = None       # V0: the last line's counters
    load: dict = field(default_factory=dict)   # the load line of the current tick, until its spec line
    load_end: int | None = None
    tick_end: int | None = None          # the previous printed tick (load or spec line)
    tick_busy: bool = False              # ... and whether vLLM surely printed the tick after it
    untimed_ticks: int = 0               # ticks anchored at --start so far (lines without a time)
    guess_now: int | None = None         # without --year: the import's time (a first date after it: last year)
    back: bool = False                   # ... the series was read as the previous year
    rollovers: int = 0                   # December → January seen
    years: set = field(default_factory=set)   # the years its MM-DD dates were read in
    load_tick: int | None = None         # … the one the pending load line was given

    def anchored(self, start_us: int, tick_us: int, opens_tick: bool) -> int:
        """The assumed time of a line without one: a tick of its own (``opens_tick``), else the tick
        of the load line before it (vLLM prints the load line, then the spec line, at one tick)."""
        if not opens_tick and self.load and self.load_tick is not None:
            return start_us + self.load_tick * tick_us
        tick, self.untimed_ticks = self.untimed_ticks, self.untimed_ticks + 1
        if opens_tick:
            self.load_tick = tick
        return start_us + tick * tick_us

    def window_start(self) -> int | None:
        """Where an interval ending at this tick starts: the previous tick, when it was busy."""
        return self.tick_end if self.tick_busy else None

    def close_tick(self, end_us: int | None, busy: bool) -> None:
        self.tick_end, self.tick_busy = end_us, busy and end_us is not None


def _busy(load: dict) -> bool:
    """A tick with prompt or generation throughput: vLLM prints the tick after it whatever happens."""
    return bool(load.get("prompt_tokens_per_s") or load.get("generation_tokens_per_s"))


def _load_layout(line: str) -> str:
    if "Pending:" in line:
        return "load V0 (`Pending:`)"
    if "Engines Aggregated:" in line:
        return "load `N Engines Aggregated:`"
    return "load V1 (`Engine 00N:`)" if _ENGINE.search(line) else "load (no engine)"


def _series_key(prefix: str) -> str:
    """The process prefix a line's logger wrote (its identity), without shipper timestamps or colours."""
    key = _ISO.sub("", prefix).strip()
    return re.sub(r"\s+", " ", key.rstrip("|").strip())


def _stamp(line: str, before: int, series: _Series, default_year: int) -> tuple[int | None, str | None]:
    """The time of a line (epoch µs) from vLLM's own prefix, else a shipper's ISO timestamp."""
    m = _LEVEL.search(" " + line[:before])
    if m is not None:
        month = int(m[1])
        if series.previous_month == 12 and month == 1:
            series.year += 1
            series.rollovers += 1
        try:
            when = dt.datetime(series.year or default_year, month, int(m[2]), int(m[3]), int(m[4]), int(m[5]),
                               int((m[6] or "0").ljust(6, "0")), tzinfo=dt.timezone.utc)
            if series.previous_month is None and series.guess_now is not None \
                    and datetime_us(when) > series.guess_now + DAY_US:
                # no --year, and this year would put the series' first date after the import: last year
                series.year, series.back = when.year - 1, True
                when = when.replace(year=series.year)
        except ValueError:
            return None, BAD_DATE
        series.previous_month = month
        series.years.add(when.year)
        return datetime_us(when), None
    iso = _ISO.match(line)
    if iso is not None:
        tz = iso[8]
        try:
            when = dt.datetime.fromisoformat(iso.group(0).strip().replace("Z", "+00:00").replace(" ", "T"))
        except ValueError:
            return None, BAD_DATE
        if tz is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        return datetime_us(when.astimezone(dt.timezone.utc)), None
    return None, NO_TIME


def import_vllm_log(files: Sequence[str | Path], out: str | Path, deployment_id: str,
                    overrides: Overrides | None = None, year: int | None = None,
                    start: str | None = None) -> ImportSummary:
    """Import vLLM log files into TRACES ``out`` as intervals of ``deployment_id``: its spec lines,
    or, in a log without any, its load lines (a baseline deployment). ``start`` (ISO-8601) anchors
    the lines that carry no time."""
    overrides = overrides or Overrides()
    now = dt.datetime.now(dt.timezone.utc)
    guess_now = datetime_us(now) if year is None else None
    year = year if year is not None else now.year
    start_us = parse_start(start)
    writer = TraceWriter(Path(out), SOURCE, files,
                         options=f"deployment={deployment_id} year={year} start={start} {overrides}")
    writer.check_layout(("intervals", "steps", "import_notes"))
    # Skips are noted with their first places (_notes), so none is persisted twice.
    summary = ImportSummary(SOURCE, Path(out), quiet_reasons=frozenset({OTHER_LINE, NOT_PARSED, NO_TIME, BAD_DATE,
                                                                        LOAD_NO_TIME, LOAD_ALONE,
                                                                        ITER_DUMMY, ITER_EMPTY}))
    cols: dict[str, list] = {c: [] for c in INTERVAL_COLUMNS + LOAD_COLUMNS}
    alone: dict[str, list] = {c: [] for c in INTERVAL_COLUMNS + LOAD_COLUMNS}   # load lines without a spec line
    counts = {"approximate": 0, "fixed_k": 0, "unknown_drafts": 0, "restarts": 0,
              "rollovers": 0, "v0_inexact": 0, "spec_lines": 0, "alone": 0, "from_start": 0, "anchored": 0,
              "iteration_lines": 0, "iteration_anchored": 0,
              "back": 0, "years": set(), "year_given": guess_now is None, "start": start}
    disagreeing: dict[str, list[str]] = {}   # printed ratio the counts contradict → places
    layouts: dict[str, int] = {}
    load_layouts: dict[str, int] = {}
    where = summary.places               # skip reason → its first three places (file:line)
    max_positions = 0
    max_k = 0
    first_unparsed: str | None = None
    alone_places: list[str] = []

    def load_alone(series: _Series, name: str) -> None:
        """The series' pending load line had no spec line at its tick: a tick of its own."""
        if not series.load:
            return
        load, series.load = series.load, {}
        if series.load_end is None:
            series.close_tick(None, False)
            return
        row = {"deployment_id": deployment_id, "series": name or None, "start_time": series.window_start(),
               "end_time": series.load_end, "source": INTERVAL_SOURCE, "num_drafts": None,
               "num_draft_tokens": None, "num_accepted_tokens": None, "accepted_per_position": None,
               **{c: load.get(c) for c in LOAD_COLUMNS[:4]},
               "reported_accept_length": None, "reported_accept_length_definition": None}
        for column in alone:
            alone[column].append(row[column])
        load_layouts[load["layout"]] = load_layouts.get(load["layout"], 0) + 1
        alone_places.append(load["place"])
        series.close_tick(series.load_end, _busy(load))

    iterations: list[Iteration] = []
    iteration_layouts: dict[str, int] = {}
    iteration_series: dict[str, _Series] = {}
    untimed_ms: dict[str, float] = {}      # series → Σ elapsed of its lines anchored at --start
    blocks_disagree: list[str] = []        # iteration lines whose kv cache % is not their used / total blocks

    def read_iteration(line: str, marker, process: str, place: str, order: tuple) -> None:
        """One `Iteration(N): …` line: a step, or a counted skip."""
        counts["iteration_lines"] += 1
        index, label = iteration_engine(line[:marker.start()])
        name = (process + (f" {label}" if label else "")).strip()
        series = iteration_series.setdefault(name, _Series(year=year, guess_now=guess_now))
        fields = parse_iteration(line[marker.start():])
        if fields is None:
            summary.skip(ITER_NOT_PARSED, place=place)
            return
        end_us, problem = _stamp(line, marker.start(), series, year)
        if problem == NO_TIME and start_us is not None:
            # untimed lines: back to back from --start, each ending its elapsed time after the one before
            untimed_ms[name] = untimed_ms.get(name, 0.0) + fields["elapsed_ms"]
            end_us, problem = start_us + ms_us(untimed_ms[name]), None
            counts["iteration_anchored"] += 1
        if fields["dummy"]:
            summary.skip(ITER_DUMMY, place=place)
            return
        if fields["gen_tokens"] == 0 and fields["ctx_tokens"] == 0:
            summary.skip(ITER_EMPTY, place=place)
            return
        if problem:
            summary.skip(ITER_NO_TIME if problem == NO_TIME else ITER_BAD_DATE, place=place)
            return
        iteration_layouts[fields["layout"]] = iteration_layouts.get(fields["layout"], 0) + 1
        if fields["blocks_agree"] is False:
            blocks_disagree.append(place)
        iterations.append(Iteration(
            series=name, engine=index, end_us=end_us, order=order, place=place, counter=fields["counter"],
            ctx_requests=fields["ctx_requests"], ctx_tokens=fields["ctx_tokens"],
            gen_requests=fields["gen_requests"], gen_tokens=fields["gen_tokens"],
            elapsed_ms=fields["elapsed_ms"], kv_usage=fields["kv_usage"]))

    for file_index, path in enumerate(files):
        path = Path(path)
        fh = open_input(path)
        series_of: dict[str, _Series] = {}
        # A process that logs for one engine only: its spec lines are that engine's, even the
        # ones with no load line before them (a log excerpt that starts between the two).
        engine_of = {process: names.pop() for process, names in _engines(path).items() if len(names) == 1}
        with fh:
            for number, raw in enumerate(fh, start=1):
                line = _ANSI.sub("", raw.rstrip("\r\n"))
                place = f"{path}:{number}"
                marker = _MARKER.search(line)
                level = _LEVEL.search(" " + line)
                process = _series_key(line[:level.start()] if level else "")
                iteration = find_marker(line) if marker is None else None
                if iteration is not None:
                    read_iteration(line, iteration, process, place, (file_index, number))
                    continue
                if marker is None:
                    if "Avg generation throughput" in line or "GPU KV cache usage" in line:
                        engine = _ENGINE.search(line)
                        name = (process + (f" Engine {engine.group(1)}" if engine else "")).strip()
                        engine_of[process] = name
                        series = series_of.setdefault(name, _Series(year=year, guess_now=guess_now))
                        load_alone(series, name)
                        start = _LOAD_START.search(line)
                        end_us, problem = _stamp(line, start.start() if start else len(line), series, year)
                        if problem == NO_TIME and start_us is not None:
                            tick = TICK_V0_US if "Pending:" in line else TICK_V1_US
                            end_us, problem = series.anchored(start_us, tick, opens_tick=True), None
                            counts["anchored"] += 1
                        else:
                            series.load_tick = None
                        if problem:
                            summary.skip(LOAD_NO_TIME if problem == NO_TIME else BAD_DATE, place=place)
                        series.load = {**parse_load(line), "layout": _load_layout(line), "place": place}
                        series.load_end = end_us
                    else:
                        summary.skip(OTHER_LINE)
                    continue
                counts["spec_lines"] += 1
                name = engine_of.get(process, process)
                series = series_of.setdefault(name, _Series(year=year, guess_now=guess_now))
                end_us, problem = _stamp(line, marker.start(), series, year)
                numbers = parse_metrics(line[marker.start():])
                if problem == NO_TIME and start_us is not None:
                    tick = TICK_V0_US if numbers is not None and numbers["cumulative"] else TICK_V1_US
                    end_us, problem = series.anchored(start_us, tick, opens_tick=False), None
                    counts["anchored"] += 1
                load, series.load = series.load, {}          # the load line of this tick, if any
                window_start = series.window_start()
                if numbers is None:
                    first_unparsed = first_unparsed or place
                    summary.skip(NOT_PARSED, place=place)
                    if end_us is not None and not series.cumulative:
                        series.previous_end = end_us   # vLLM reset its counters when it logged this line
                    series.close_tick(end_us, True)    # a printed spec line: the tick drafted
                    continue
                if problem:
                    summary.skip(problem, place=place)
                    series.close_tick(None, False)
                    continue
                layouts[numbers["layout"]] = layouts.get(numbers["layout"], 0) + 1
                if numbers["cumulative"]:
                    interval = _v0_interval(numbers, series, counts)
                    series.cumulative = numbers
                    start = series.previous_end if interval.pop("continues") else None
                    if start is None:       # counts from the engine's start (or a restart): not this tick's
                        load = {key: value for key, value in load.items() if key != "generation_tokens_per_s"}
                    wrong = disagreements(numbers)
                else:
                    rates = numbers["rates"]
                    n, how = num_drafts_from(numbers["accepted"], numbers["mean"], numbers["drafted"],
                                             len(rates) or None)
                    counts[how or "unknown_drafts"] += 1
                    interval = {"num_drafts": n, "num_draft_tokens": numbers["drafted"],
                                "num_accepted_tokens": numbers["accepted"],
                                "accepted_per_position": [round_half_up(r * n) for r in rates]
                                if n is not None and rates else None}
                    start = window_start
                    max_positions = max(max_positions, len(rates))
                    wrong = disagreements(numbers, n)
                for name_of_field in wrong:
                    disagreeing.setdefault(name_of_field, []).append(place)
                max_k = max(max_k, numbers["k"] or 0)
                row = {"deployment_id": deployment_id, "series": name or None, "start_time": start,
                       "end_time": end_us, "source": INTERVAL_SOURCE, **interval,
                       "running_requests": load.get("running_requests"),
                       "waiting_requests": load.get("waiting_requests"),
                       "generation_tokens_per_s": load.get("generation_tokens_per_s"),
                       "kv_cache_usage": load.get("kv_cache_usage"),
                       "reported_accept_length": numbers["mean"],
                       "reported_accept_length_definition": MEAN_DEFINITION if numbers["mean"] is not None else None}
                for column in cols:
                    cols[column].append(row[column])
                series.previous_end = end_us
                series.close_tick(end_us, _busy(load) or numbers["drafted"] > 0)
        for name, series in series_of.items():
            load_alone(series, name)
        counts["rollovers"] += sum(s.rollovers for s in series_of.values())
        counts["back"] += sum(1 for s in series_of.values() if s.back)
        counts["years"] |= {y for s in series_of.values() for y in s.years}
    # the iteration lines' series: their MM-DD dates are read like the spec lines'
    counts["back"] += sum(1 for s in iteration_series.values() if s.back)
    counts["years"] |= {y for s in iteration_series.values() for y in s.years}
    counts["rollovers"] += sum(s.rollovers for s in iteration_series.values())

    baseline = not counts["spec_lines"]
    steps = _steps(iterations, None if baseline else cols, deployment_id, summary, counts, iteration_layouts)
    if blocks_disagree:
        summary.note(f"{len(blocks_disagree)} iteration line{'s' if len(blocks_disagree) != 1 else ''} whose printed "
                     "kv cache percentage is not its used / total blocks within the printed rounding (kv_usage "
                     f"kept as printed), first at {', '.join(blocks_disagree[:3])}", deployment_id)
    if baseline:
        cols, layouts = alone, load_layouts
    elif alone["end_time"]:
        counts["alone"] = len(alone["end_time"])
        summary.skip(LOAD_ALONE, n=counts["alone"])
        where[LOAD_ALONE] = alone_places[:3]
    if not cols["end_time"] and not steps["step_id"]:
        iterated = counts["iteration_lines"]
        raise ImportInputError(f"{', '.join(str(p) for p in files)}: nothing to import: "
                               f"{_nothing_found(first_unparsed, where, counts['spec_lines'], iterated)} "
                               "(layouts: `specan import vllm-log --list-layouts`)")
    if cols["end_time"]:
        _notes(summary, deployment_id, year, counts, layouts, where, cols, baseline)
    else:
        # steps alone: only the year their MM-DD dates were read in needs saying
        _year_note(counts, lambda text: summary.note(text, deployment_id))
    for name_of_field, places in sorted(disagreeing.items()):
        summary.note(f"{len(places)} metrics line{'s' if len(places) != 1 else ''} whose printed {name_of_field} "
                     f"disagree{'s' if len(places) == 1 else ''} with its Accepted and Drafted counts beyond the "
                     f"printed rounding (imported with the counts as printed), first at {', '.join(places[:3])}",
                     deployment_id)
    speculated = any(d for d in cols["num_draft_tokens"] if d)
    row = deployment_row(deployment_id, overrides, model=None, speculated=speculated,
                         num_spec_tokens=(max_k or max_positions) or None)
    writer.merge_deployment(row, summary)
    if cols["end_time"]:
        writer.add("intervals", cols, times=cols["end_time"], drop_empty_optional=LOAD_COLUMNS + ("series",))
    if steps["step_id"]:
        writer.add("steps", steps, times=steps["start_time"], drop_empty_optional=("kv_usage",))
    return finish(writer, summary, deployment_id)


def _steps(iterations: list[Iteration], spec: dict | None, deployment_id: str, summary: ImportSummary,
           counts: dict, layouts: dict) -> dict[str, list]:
    """The steps of the iteration lines: their times, step ids and token counts (module vllm_iterations),
    with a note for every choice. ``spec``: the spec-decode intervals of a speculative log, else None."""
    cols: dict[str, list] = {c: [] for c in STEP_COLUMNS}
    note = lambda text: summary.note(text, deployment_id)  # noqa: E731
    plural = lambda n, word: f"{n} {word}{'s' if n != 1 else ''}"  # noqa: E731
    for reason, what in ((ITER_DUMMY, "dummy iteration"),
                         (ITER_EMPTY, "iteration with zero generation and zero context tokens")):
        if summary.skipped.get(reason):
            n = summary.skipped[reason]
            note(f"{plural(n, what)} left out of the steps "
                 f"(no request decoded or prefilled), first at {', '.join(summary.places[reason])}")
    if not iterations:
        return cols
    # vLLM logs a line when its iteration ends, with a time to the second: order by that time, then by
    # the order the lines were printed in (the Iteration(N) counter of an engine)
    iterations.sort(key=lambda s: (s.end_us // 1_000_000, s.order))
    if spec is None:
        mismatch = 0
        for step in iterations:
            step.drafts, step.accepted, step.committed = 0, 0, step.gen_requests
            step.counts_from = "iteration"
            mismatch += step.gen_tokens != step.gen_requests
        note("token counts per step from the iteration line itself: a deployment that does not speculate "
             "commits one token per generation request (num_committed_tokens = generation requests, no drafts)")
        if mismatch:
            note(f"{plural(mismatch, 'step')} whose generation tokens differ from its generation requests in a log "
                 "without spec-decode lines (speculating without printing its metrics?): committed tokens are "
                 "taken as one per generation request")
    else:
        _window_counts(iterations, spec, note, plural)
    second, rank = None, 0
    for step in iterations:
        this = step.end_us // 1_000_000
        rank = rank + 1 if this == second else 0
        second = this
        cols["deployment_id"].append(deployment_id)
        cols["step_id"].append(this * 1_000_000 + rank)
        cols["start_time"].append(step.end_us - ms_us(step.elapsed_ms))
        cols["duration_ms"].append(step.elapsed_ms)
        cols["batch_size"].append(step.gen_requests)
        cols["num_prefill_tokens"].append(step.ctx_tokens)
        cols["kv_usage"].append(step.kv_usage)
        cols["num_draft_tokens"].append(step.drafts)
        cols["num_accepted_tokens"].append(step.accepted)
        cols["num_committed_tokens"].append(step.committed)
        cols["counts_from"].append(step.counts_from)
    engines = sorted({s.series for s in iterations})
    note(f"{plural(len(iterations), 'step')} from vLLM's iteration lines (" + ", ".join(
        f"{name} ({n})" for name, n in sorted(layouts.items())) + "): start_time = the line's time − its "
         "iteration elapsed time (vLLM logs the line when the iteration ends), duration_ms = the elapsed time, "
         "batch_size = generation requests, num_prefill_tokens = context tokens, kv_usage = the printed KV "
         "cache percentage / 100 where printed. vLLM's log times have one-second resolution: steps within one "
         "second are ordered by the order of their lines (the Iteration(N) counter), step_id = that second "
         "(epoch) × 1,000,000 + the step's place within it, so step_id increases with the logged time"
         + (f"; {len(engines)} engines: " + ", ".join(engines) if len(engines) > 1 else ""))
    if counts["iteration_anchored"]:
        note(f"{plural(counts['iteration_anchored'], 'iteration line')} without a date and time anchored at "
             "--start: each engine's lines back to back from --start, each ending its elapsed time after the "
             "one before; these times are assumed, not read")
    return cols


def _window_counts(iterations: list[Iteration], spec: dict, note, plural) -> None:
    """Drafts, accepted and committed tokens of a speculative log's steps, from the spec-decode window
    that covers each step (vllm_iterations.estimate_window)."""
    windows: dict[int, list[tuple[int, int, int]]] = {}   # engine → [(end, accepted, drafted)]
    for series, end, drafted, accepted in zip(spec["series"], spec["end_time"], spec["num_draft_tokens"],
                                              spec["num_accepted_tokens"]):
        if end is None or drafted is None or accepted is None:
            continue
        engine = _ENGINE_NAME.search(series or "")
        windows.setdefault(int(engine.group(1)) if engine else 0, []).append((end, accepted, drafted))
    for engine in windows:
        windows[engine].sort()
    ends = {engine: [w[0] for w in rows] for engine, rows in windows.items()}
    members: dict[tuple[int, int], list[Iteration]] = {}
    outside = negative = 0
    for step in iterations:
        if step.gen_tokens < step.gen_requests:
            negative += 1
            continue
        # the window of spec line j: after line j − 1 of this engine, up to and at line j
        j = bisect.bisect_left(ends.get(step.engine, []), step.end_us)
        if j == 0 or j == len(ends.get(step.engine, [])):
            outside += 1
            continue
        step.drafts = step.gen_tokens - step.gen_requests
        members.setdefault((step.engine, j), []).append(step)
    differ: list[str] = []
    unknown = 0
    for (engine, j), steps in sorted(members.items()):
        end, accepted, drafted = windows[engine][j]
        gap = estimate_window(steps, accepted, drafted)
        when = dt.datetime.fromtimestamp(end / 1e6, dt.timezone.utc).strftime("%m-%d %H:%M:%S")
        if gap is None:
            unknown += 1
        elif gap:
            differ.append(f"engine {engine} {when}: the steps drafted {sum(s.drafts for s in steps)}, the line "
                          f"counts {drafted}")
    note("committed tokens per step estimated from the spec-decode window's acceptance rate: a step's drafts = "
         "generation tokens − generation requests (vLLM prints the scheduled tokens, 1 + drafts per request); a "
         "window (an engine's steps that ended after its previous spec-decode line, up to and at this one) gets "
         "round(Σ drafts × Accepted / Drafted) accepted tokens, spread over its steps in proportion to their "
         "drafts by the largest-remainder method; num_committed_tokens = generation requests + accepted; "
         "counts_from = 'window'")
    if outside:
        note(f"{plural(outside, 'step')} outside any spec-decode window (before its engine's first spec-decode "
             "line, after its last, or of an engine without one): no token counts")
    if negative:
        note(f"{plural(negative, 'step')} with fewer generation tokens than generation requests: no token counts")
    if unknown:
        note(f"{plural(unknown, 'window')} whose spec-decode line drafted nothing while its steps drafted: the "
             "acceptance rate is unknown, those steps have drafts but no accepted or committed tokens")
    if differ:
        note(f"{plural(len(differ), 'window')} whose steps' drafts (Σ generation tokens − generation requests) "
             "differ from its spec-decode line's Drafted (the estimate uses the line's rate over the steps' "
             "drafts): " + "; ".join(differ[:3]) + (" …" if len(differ) > 3 else ""))


def parse_start(start: str | None) -> int | None:
    """``--start``: an ISO-8601 time (UTC without an offset) → epoch µs."""
    if start is None:
        return None
    when = parse_time(start) if not start.strip().lstrip("-").replace(".", "", 1).isdigit() else None
    if when is None:
        raise ImportInputError(f"--start: {start!r} is not an ISO-8601 time like 2026-05-30T07:49:11")
    return when


def _nothing_found(first_unparsed: str | None, where: dict, spec_lines: int, iteration_lines: int = 0) -> str:
    """Why a file imported nothing, naming what was looked for and the first line that did not import,
    with its cause."""
    if iteration_lines and not spec_lines:
        for reason in (ITER_NO_TIME, ITER_NOT_PARSED, ITER_BAD_DATE, ITER_DUMMY, ITER_EMPTY):
            if where.get(reason):
                return (f"{iteration_lines} iteration line{'s' if iteration_lines != 1 else ''} and none kept; "
                        f"the first that did not import is {where[reason][0]}: {reason}")
    if first_unparsed:
        return f"the first metrics line that did not import is {first_unparsed} (it does not parse)"
    for reason, cause in ((NO_TIME, NO_TIME_HINT), (BAD_DATE, "an impossible date")):
        if where.get(reason):
            return f"the first metrics line that did not import is {where[reason][0]}: {cause}"
    if not spec_lines and where.get(LOAD_NO_TIME):
        return (f"no speculative-decoding metrics line, and the load lines have no date and time "
                f"(first at {where[LOAD_NO_TIME][0]}; pass --start TIME to anchor lines without one)")
    return ("no line looks like vLLM's speculative-decoding metrics or its load line "
            "(`Avg generation throughput: … Running: N reqs`)")


def _engines(path: Path) -> dict[str, set[str]]:
    """Process prefix → the series names of the engines its load lines name."""
    found: dict[str, set[str]] = {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            line = _ANSI.sub("", raw.rstrip("\r\n"))
            engine = _ENGINE.search(line)
            if engine is None or _MARKER.search(line) or find_marker(line):
                continue
            level = _LEVEL.search(" " + line)
            process = _series_key(line[:level.start()] if level else "")
            found.setdefault(process, set()).add(f"{process} Engine {engine.group(1)}".strip())
    return found


def _v0_interval(numbers: dict, series: _Series, counts: dict) -> dict | None:
    """The difference of a V0 line and the series' previous one.

    A series' first line counts from the engine's start, and after a restart (a counter went
    down) the line counts from the restart: both times are unknown, so the interval keeps the
    line's counts and gets no start time."""
    previous = series.cumulative
    keys = ("accepted", "drafted", "emitted")
    if previous is None:
        counts["from_start"] += 1
        delta, continues = {key: numbers[key] for key in keys}, False
    elif any(numbers[key] is not None and previous[key] is not None and numbers[key] < previous[key] for key in keys):
        counts["restarts"] += 1
        delta, continues = {key: numbers[key] for key in keys}, False
    else:
        delta = {key: (numbers[key] - previous[key]) if numbers[key] is not None and previous[key] is not None
                 else None for key in keys}
        continues = True
    k = numbers["k"]
    steps = delta["drafted"] // k if k and delta["drafted"] % k == 0 else None
    if k and steps is None:
        counts["v0_inexact"] += 1
    # each step emits its accepted prefix plus one token
    prefix = delta["emitted"] - steps if steps is not None and delta["emitted"] is not None else None
    return {"num_drafts": steps, "num_draft_tokens": delta["drafted"],
            "num_accepted_tokens": prefix if prefix is not None else delta["accepted"],
            "accepted_per_position": None, "continues": continues}


def _year_note(counts: dict, note) -> None:
    """The year vLLM's MM-DD dates were read in, and why; nothing when no line had one."""
    if not counts["years"]:
        return
    years = ", ".join(str(y) for y in sorted(counts["years"]))
    why = ("--year" if counts["year_given"] else
           f"no --year: the current year, or the previous one for {counts['back']} series whose "
           f"first date would lie after the import" if counts["back"] else "no --year: the current year")
    rollovers = counts["rollovers"]
    note(f"log times have no year and no time zone: read as UTC in {years} ({why})"
         + (f"; {rollovers} year rollover{'s' if rollovers != 1 else ''} from December to January"
            if rollovers else ""))


def _notes(summary: ImportSummary, deployment_id: str, year: int, counts: dict, layouts: dict,
           where: dict, cols: dict, baseline: bool) -> None:
    note = lambda text: summary.note(text, deployment_id)  # noqa: E731
    plural = lambda n, word: f"{n} {word}{'s' if n != 1 else ''}"  # noqa: E731
    note("layouts read: " + ", ".join(f"{name} ({n})" for name, n in sorted(layouts.items())))
    if baseline:
        note("no speculative-decoding line: a deployment that does not speculate (a baseline); one interval "
             "per load line, with its running requests, generation throughput and KV usage, and no counts")
    unstarted = sum(1 for s, e in zip(cols["start_time"], cols["end_time"]) if s is None) - counts["restarts"] - counts["from_start"]
    if unstarted:
        note(f"{plural(unstarted, 'interval')} without a start time: the first of a series, or after a tick "
             "that printed zero prompt and generation throughput (vLLM prints no line for an idle tick after "
             "an idle one, so the window of the throughput is unknown)")
    if counts["anchored"]:
        note(f"{plural(counts['anchored'], 'line')} without a date and time anchored at --start {counts['start']}: "
             "each series' "
             "first tick at --start, each later tick one logging interval on (vLLM's defaults: 5 s for V0, "
             "10 s for V1); these times are assumed, not read")
    _year_note(counts, note)
    if counts["fixed_k"]:
        note(f"num_drafts = Drafted / k on {plural(counts['fixed_k'], 'interval')} (k = the number of "
             "per-position rates), where that agrees with the printed mean acceptance length: every step "
             "drafted k tokens; accepted_per_position = round(rate × num_drafts)")
    if counts["approximate"]:
        note(f"num_drafts is approximate on {plural(counts['approximate'], 'interval')}: "
             "round(Accepted / (mean acceptance length − 1)), the mean printed to 2 decimals; "
             "accepted_per_position = round(rate × num_drafts)")
    if counts["unknown_drafts"]:
        note(f"num_drafts unknown on {plural(counts['unknown_drafts'], 'interval')} (no mean acceptance "
             "length printed, or 1.00: nothing accepted)")
    if layouts.get("v0"):
        note("V0 counters are cumulative: each interval is the difference of consecutive lines of its series; "
             "num_drafts = draft tokens / k, and the accepted prefix = emitted tokens − num_drafts "
             "(V0's own 'accepted' counts matches after the first rejection too)")
    if counts["from_start"]:
        note(f"{plural(counts['from_start'], 'interval')} from the engine's start: the first V0 line of a series "
             "counts from the engine's start (V0 counters are cumulative), whose time the log does not show, so "
             "it has no start time and no generation throughput (the load line's covers its own tick only)")
    if counts["restarts"]:
        note(f"{plural(counts['restarts'], 'engine restart')} (a cumulative counter went down): "
             "those intervals count from the restart and have no start time and no generation throughput")
    if counts["v0_inexact"]:
        note(f"{plural(counts['v0_inexact'], 'V0 interval')} whose draft tokens are not a multiple of k: "
             "num_drafts unknown, accepted tokens as V0 counts them")
    series = {s for s in cols["series"] if s}
    if len(series) > 1:
        note(f"{len(series)} series (engines or processes): " + ", ".join(sorted(series))
             + "; each interval starts at the previous tick of its own series")
    backwards = sum(1 for s, e in zip(cols["start_time"], cols["end_time"]) if s is not None and e < s)
    if backwards:
        note(f"{backwards} lines are earlier than the line before: the loader will reject them as time_order")
    for reason, places in sorted(where.items()):
        if reason in summary.skipped:
            note(f"{plural(summary.skipped[reason], 'line')} skipped ({reason}), first at {', '.join(places)}")
