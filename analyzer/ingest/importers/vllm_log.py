"""`specan import vllm-log`: vLLM's periodic SpecDecoding log line → intervals.

The line, after a prefix such as ``(APIServer pid=1) INFO 05-30 07:49:21 [metrics.py:101] ``::

    SpecDecoding metrics: Mean acceptance length: 2.45, Accepted throughput: 12.30 tokens/s,
    Drafted throughput: 25.00 tokens/s, Accepted: 123 tokens, Drafted: 250 tokens,
    Per-position acceptance rate: 0.800, 0.550, 0.350, 0.200, Avg Draft acceptance rate: 49.2%

The per-position rates use the fields' own separator, so the parser anchors on
``Avg Draft acceptance rate``. The prefix has no year (``--year``) and no time
zone (read as UTC). Each line counts what happened since the previous line
(vLLM resets its counters after logging), so start_time is the previous line's
end_time, and null for a file's first line.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Sequence
from pathlib import Path

from .common import (ImportInputError, ImportSummary, Overrides, TraceWriter, datetime_us, deployment_row,
                     finish)

SOURCE = "vllm-log"
INTERVAL_SOURCE = "vllm_log"

OTHER_LINE = "not a SpecDecoding metrics line"

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PREFIX_TIME = re.compile(r"(?:^|[\s)\]])(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+"
                          r"(\d{2})-(\d{2})\s+(\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,6}))?")
_METRICS = re.compile(
    r"SpecDecoding metrics: "
    r"Mean acceptance length: (?P<mean>[^,\s]+), "
    r"Accepted throughput: [^,\s]+ tokens/s, "
    r"Drafted throughput: [^,\s]+ tokens/s, "
    r"Accepted: (?P<accepted>\d+) tokens, "
    r"Drafted: (?P<drafted>\d+) tokens, "
    r"Per-position acceptance rate: (?P<rates>.*), "
    r"Avg Draft acceptance rate: (?P<avg>[^%\s]+)%")

INTERVAL_COLUMNS = ("deployment_id", "start_time", "end_time", "num_drafts", "num_draft_tokens",
                    "num_accepted_tokens", "accepted_per_position", "source")


def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def parse_metrics(text: str) -> dict | None:
    """The numbers of one SpecDecoding metrics message, or None when it does not parse."""
    m = _METRICS.search(text)
    if m is None:
        return None
    try:
        mean = float(m["mean"])
        rates = [float(r) for r in m["rates"].split(", ")] if m["rates"].strip() else []
    except ValueError:
        return None
    if any(not math.isfinite(r) for r in rates):
        return None
    return {"mean": mean, "accepted": int(m["accepted"]), "drafted": int(m["drafted"]), "rates": rates}


def num_drafts_from(accepted: int, mean: float) -> int | None:
    """round(Accepted / (mean − 1)) when mean − 1 > 0: approximate, the mean has 2 decimals."""
    if not math.isfinite(mean) or mean - 1 <= 0:
        return None
    n = round_half_up(accepted / (mean - 1))
    return n if n > 0 else None


def import_vllm_log(files: Sequence[str | Path], out: str | Path, deployment_id: str,
                    overrides: Overrides | None = None, year: int | None = None) -> ImportSummary:
    """Import vLLM log files into TRACES ``out`` as intervals of ``deployment_id``."""
    overrides = overrides or Overrides()
    year = year if year is not None else dt.datetime.now(dt.timezone.utc).year
    writer = TraceWriter(Path(out), SOURCE)
    writer.check_layout(("intervals", "import_notes"))
    summary = ImportSummary(SOURCE, Path(out), quiet_reasons=frozenset({OTHER_LINE}))
    cols: dict[str, list] = {c: [] for c in INTERVAL_COLUMNS}
    approximate = rollovers = backwards = 0
    max_positions = 0

    for path in files:
        path = Path(path)
        try:
            fh = open(path, encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ImportInputError(f"{path}: can't read ({exc.strerror or exc})") from None
        file_year, previous_end, previous_month = year, None, None
        with fh:
            for raw in fh:
                line = _ANSI.sub("", raw.rstrip("\r\n"))
                at = line.find("SpecDecoding metrics")
                if at < 0:
                    summary.skip(OTHER_LINE)
                    continue
                numbers = parse_metrics(line[at:])
                stamp = _PREFIX_TIME.search(" " + line[:at])
                if stamp is None:
                    summary.skip("SpecDecoding metrics line that does not parse" if numbers is None
                                 else "SpecDecoding metrics line without a date and time")
                    continue
                month = int(stamp[1])
                if previous_month == 12 and month == 1:
                    file_year += 1
                    rollovers += 1
                try:
                    end = dt.datetime(file_year, month, int(stamp[2]), int(stamp[3]), int(stamp[4]),
                                      int(stamp[5]), int((stamp[6] or "0").ljust(6, "0")), tzinfo=dt.timezone.utc)
                except ValueError:
                    summary.skip("SpecDecoding metrics line with an impossible date")
                    continue
                previous_month = month
                end_us = datetime_us(end)
                if numbers is None:
                    # vLLM reset its counters when it logged this line: the next interval starts here.
                    summary.skip("SpecDecoding metrics line that does not parse")
                    previous_end = end_us
                    continue
                if previous_end is not None and end_us < previous_end:
                    backwards += 1
                n = num_drafts_from(numbers["accepted"], numbers["mean"])
                if n is not None:
                    approximate += 1
                rates = numbers["rates"]
                max_positions = max(max_positions, len(rates))
                cols["deployment_id"].append(deployment_id)
                cols["start_time"].append(previous_end)
                cols["end_time"].append(end_us)
                cols["num_drafts"].append(n)
                cols["num_draft_tokens"].append(numbers["drafted"])
                cols["num_accepted_tokens"].append(numbers["accepted"])
                cols["accepted_per_position"].append(
                    [round_half_up(r * n) for r in rates] if n is not None and rates else None)
                cols["source"].append(INTERVAL_SOURCE)
                previous_end = end_us

    rows = len(cols["end_time"])
    note = lambda text: summary.note(text, deployment_id)  # noqa: E731
    if rows:
        note(f"log times have no year and no time zone: read as UTC in {year}"
             + (f" ({rollovers} year rollover{'s' if rollovers != 1 else ''} from December to January)"
                if rollovers else ""))
    if approximate:
        note(f"num_drafts is approximate on {approximate} interval{'s' if approximate != 1 else ''}: "
             f"round(Accepted / (mean acceptance length − 1)), the mean printed to 2 decimals; "
             f"accepted_per_position = round(rate × num_drafts)")
    if rows - approximate:
        note(f"num_drafts unknown on {rows - approximate} interval{'s' if rows - approximate != 1 else ''} "
             f"(mean acceptance length 1.00: nothing accepted)")
    duplicates = rows - len(set(cols["end_time"]))
    if duplicates:
        note(f"{duplicates} lines share their second with another line (several engines logging?): the loader "
             f"will reject those intervals as duplicate_key")
    if backwards:
        note(f"{backwards} lines are earlier than the line before: the loader will reject them as time_order")
    speculated = any(d > 0 for d in cols["num_draft_tokens"])
    if not rows:
        note("no SpecDecoding metrics lines found")
    row = deployment_row(deployment_id, overrides, model=None, speculated=speculated,
                         num_spec_tokens=max_positions or None)
    writer.merge_deployment(row, summary)
    writer.add("intervals", cols, times=cols["end_time"])
    return finish(writer, summary, deployment_id)
