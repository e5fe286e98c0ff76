"""The nightly regression rule: is a date's headline metric a regression against the dates
before it? (docs/commands.md, "Regressions").

The history itself (``history.parquet``, its lock and its rows) is
``analyzer.analysis.history``; this module only judges it. ``check_regressions``
compares each deployment's date with its window of earlier dates that were not
flagged themselves (``replay``), against max(threshold, the window's robust spread).
"""

from __future__ import annotations

import datetime as dt
import statistics
from typing import Any

import polars as pl

from ..analysis.config import Nightly, Regression

# metric -> (config attribute, direction): a drop below -limit or a rise above +limit,
# where limit = max(threshold, the window's robust spread) (check_regressions).
CHECKED = {
    "mean_accept_length": ("max_accept_length_drop", "drop"),
    "speedup": ("max_speedup_drop", "drop"),
    "tpot_p99": ("max_tpot_p99_rise", "rise"),
}


# The window's spread is SPREAD_SDS robust standard deviations: 1.4826 · MAD (the median
# absolute deviation from the median) estimates the standard deviation of normal noise, and
# one bad day moves the median and the MAD by at most one rank, where it set (max − min)
# outright. SPREAD_SDS is chosen on 21 simulated days (docs/commands.md, bench/nightly_study.py).
MAD_TO_SD = 1.4826
SPREAD_SDS = 4.0


def check_regressions(history: pl.DataFrame, date: dt.date, rule: Regression,
                      nightly: Nightly | None = None) -> tuple[dict, list[dict]]:
    """Compare ``date`` with its window of earlier dates, per deployment: ``(check, flagged)``.

    The window of a deployment's metric on a date is its latest ``rule.window_days``
    earlier dates (earlier than that date only: dates after it, as in a backfill, never
    count) that were not flagged for that metric, and, when the date is on or after the
    deployment's ``accept_since``, none before it. Whether an earlier date was flagged is
    not stored: :func:`replay` judges the deployment's dates in order by this same rule,
    so the answer is a function of the history and the config alone, the same on a re-run,
    and a changed threshold applies to the past as well.

    A metric is flagged when its change against the window's median is past
    max(threshold, spread), spread = SPREAD_SDS · 1.4826 · MAD / |median| (:func:`_flag`).
    Nothing is flagged for a deployment with fewer than ``rule.min_history_dates`` earlier
    dates of its own: a median of one or two days is one or two noisy days.

    ``check`` is the report's ``regression_check``: ``status`` is ``checked`` when at least
    one deployment of the date had ``needed`` earlier dates, else ``insufficient_history``;
    ``earlier_dates`` is the most any deployment had (at most ``window_days``);
    ``not_checked`` lists the deployments that had too few; ``accepted_since`` maps each
    deployment whose ``accept_since`` is in effect on ``date`` to it.
    """
    nightly = nightly or Nightly()
    needed, window_days = rule.min_history_dates, rule.window_days
    known = history.filter(pl.col("date") <= date)
    check: dict[str, Any] = {"status": "insufficient_history", "earlier_dates": 0, "needed": needed,
                             "window_days": window_days, "not_checked": [], "accepted_since": {}}
    flagged: list[dict] = []
    usable_counts = [0]
    for deployment in known.filter(pl.col("date") == date).get_column("deployment_id").sort().to_list():
        own = known.filter(pl.col("deployment_id") == deployment)
        since = nightly.accepted_from(deployment)
        if since is not None and since <= date:
            own = own.filter(pl.col("date") >= since)
            check["accepted_since"][deployment] = since.isoformat()
        own = own.sort("date")
        earlier = own.height - 1
        usable_counts.append(min(earlier, window_days))
        if earlier < needed:
            entry = {"deployment_id": deployment, "earlier_dates": earlier}
            if deployment in check["accepted_since"]:
                entry["accepted_since"] = check["accepted_since"][deployment]
            check["not_checked"].append(entry)
            continue
        dates = [d.isoformat() for d in own.get_column("date").to_list()]
        for metric, (threshold_key, direction) in CHECKED.items():
            today = replay(dates, own.get_column(metric).to_list(), needed, window_days,
                           getattr(rule, threshold_key), direction)[-1]
            if today:
                flagged.append({"deployment_id": deployment, "metric": metric, **today})
    check["earlier_dates"] = max(usable_counts)
    if check["earlier_dates"] >= needed:
        check["status"] = "checked"
    else:
        # nothing was compared: naming every deployment as left out would only repeat the status
        check["not_checked"] = []
    return check, flagged


def replay(dates: list[str], values: list[float | None], needed: int, window_days: int, threshold: float,
           direction: str) -> list[dict | None]:
    """One deployment's metric judged date by date in order: the flag entry of each date, or None.

    ``dates`` are ascending ISO dates, ``values`` the metric on them. A date is judged
    against the latest ``window_days`` earlier dates that were not flagged themselves;
    the first ``needed`` dates have too few earlier ones and are never flagged. A flag on
    the date right after a flagged one continues it: ``flagged_since`` is the first date
    of the unbroken run.
    """
    judged: list[dict | None] = []
    unflagged: list[int] = []
    for i, value in enumerate(values):
        found = None
        if i >= needed:
            window = unflagged[-window_days:]
            found = _flag(value, [values[j] for j in window if values[j] is not None], needed, threshold, direction)
        if found:
            previous = judged[i - 1] if i else None
            found |= {
                "window_dates": [dates[j] for j in window],
                # the flagged dates the window reached past: without them it would be later dates
                "excluded_flagged_dates": [dates[j] for j in range(window[0], i) if judged[j] is not None],
                "flagged_since": previous["flagged_since"] if previous else dates[i],
            }
        else:
            unflagged.append(i)
        judged.append(found)
    return judged


def _flag(value: float | None, window: list[float], needed: int, threshold: float, direction: str) -> dict | None:
    """The regression entry when ``value`` is past max(threshold, spread) in ``direction``, else None."""
    # A metric null on some earlier days (a baseline's accept length, a day without TPOT)
    # needs as many real values as the deployment needs dates.
    if value is None or len(window) < needed:
        return None
    baseline = statistics.median(window)
    if baseline == 0:
        return None
    change = (value - baseline) / baseline
    spread = robust_spread(window, baseline)
    limit = max(threshold, spread)
    if (direction == "drop" and change < -limit) or (direction == "rise" and change > limit):
        return {"value": value, "baseline": baseline, "change": change, "spread": spread, "limit": limit}
    return None


def robust_spread(window: list[float], baseline: float) -> float:
    """SPREAD_SDS · 1.4826 · MAD / |baseline|, MAD = the median of |value − baseline| over the window."""
    mad = statistics.median(abs(v - baseline) for v in window)
    return SPREAD_SDS * MAD_TO_SD * mad / abs(baseline)
