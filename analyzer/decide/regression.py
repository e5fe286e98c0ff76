"""The nightly regression rule: is a date's headline metric a regression against the dates
before it? (docs/commands.md, "Regressions").

The history itself (``history.parquet``, its lock and its rows) is
``analyzer.analysis.history``; this module only judges it. ``check_regressions``
judges each deployment's date by two rules, and flags it when either does:

- the window (``replay``): the date against its window of earlier dates that were not
  flagged themselves, past max(threshold, the window's robust spread). It catches a
  change from one day to the next and keeps a lasting one flagged;
- the reference (``replay_reference``): the date against the deployment's first full
  window of dates (from ``accept_since`` where that is in effect), past max(threshold, the
  reference's noise spread), for accept length and speedup (``REFERENCE_CHECKED``: a
  cumulative drop). It catches a slow decline, which the window follows down:
  against a 7-date median a decline of r a day is about 4r, while the window's spread
  grows to about 4 · 1.4826 · 2r ≈ 11.9r, so a window alone never flags it.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from typing import Any

import polars as pl

from ..analysis.config import Nightly, Regression

# metric -> (config attribute, direction): a drop below -limit or a rise above +limit,
# where limit = max(threshold, the window's or the reference's spread) (check_regressions).
CHECKED = {
    "mean_accept_length": ("max_accept_length_drop", "drop"),
    "speedup": ("max_speedup_drop", "drop"),
    "tpot_p99": ("max_tpot_p99_rise", "rise"),
}
# The metrics the reference judges: a cumulative drop of accept length or speedup. tpot_p99
# is a tail percentile that the workload's bursts lift on several days at once, and load
# moves it as much as speculation does; against a fixed reference it flagged 7 and 18 of 84
# unchanged deployment-days of the study (bench/nightly_study.py), so the window alone
# judges it.
REFERENCE_CHECKED = ("mean_accept_length", "speedup")


# The window's spread is SPREAD_SDS robust standard deviations: 1.4826 · MAD (the median
# absolute deviation from the median) estimates the standard deviation of normal noise, and
# one bad day moves the median and the MAD by at most one rank, where it set (max − min)
# outright. SPREAD_SDS is chosen on 21 simulated days (docs/commands.md, bench/nightly_study.py).
# The reference's spread is the same number of standard deviations of its noise
# (reference_noise), so both rules flag ordinary days about equally rarely.
MAD_TO_SD = 1.4826
SPREAD_SDS = 4.0

WINDOW, REFERENCE = "window", "reference"


def check_regressions(history: pl.DataFrame, date: dt.date, rule: Regression,
                      nightly: Nightly | None = None) -> tuple[dict, list[dict]]:
    """Judge ``date`` by the window and the reference rules, per deployment: ``(check, flagged)``.

    The window of a deployment's metric on a date is its latest ``rule.window_days``
    earlier dates (earlier than that date only: dates after it, as in a backfill, never
    count) that were not flagged by the window rule for that metric, and, when the date is
    on or after the deployment's ``accept_since``, none before it. Whether an earlier date
    was flagged is not stored: :func:`replay` judges the deployment's dates in order by this
    same rule, so the answer is a function of the history and the config alone, the same on
    a re-run, and a changed threshold applies to the past as well.

    A metric is flagged by the window when its change against the window's median is past
    max(threshold, spread), spread = SPREAD_SDS · 1.4826 · MAD / |median| (:func:`_flag`).
    Nothing is flagged for a deployment with fewer than ``rule.min_history_dates`` earlier
    dates of its own: a median of one or two days is one or two noisy days.

    The reference of a deployment on a date is its first ``rule.window_days`` dates, from
    its ``accept_since`` on when that is in effect on the date (:func:`replay_reference`).
    A date after them is flagged by the reference when its change against the reference's
    median is past max(threshold, the reference's noise spread); each flag entry says
    which rule flagged it (``"rule"``), and a metric both rules flag has one entry of each.

    ``check`` is the report's ``regression_check``: ``status`` is ``checked`` when at least
    one deployment of the date had ``needed`` earlier dates, else ``insufficient_history``;
    ``earlier_dates`` is the most any deployment had (at most ``window_days``);
    ``not_checked`` lists the deployments that had too few; ``accepted_since`` maps each
    deployment whose ``accept_since`` is in effect on ``date`` to it; ``references`` maps
    each deployment of the date to its reference: ``status`` ``set`` with its ``dates`` and,
    per metric, the number of ``values`` among them, their ``median``, ``spread`` and
    ``limit`` (None where too few values or a median of 0 leave the metric without one), or
    ``status`` ``forming`` with the deployment's ``dates`` so far, the date among them.
    """
    nightly = nightly or Nightly()
    needed, window_days = rule.min_history_dates, rule.window_days
    known = history.filter(pl.col("date") <= date)
    check: dict[str, Any] = {"status": "insufficient_history", "earlier_dates": 0, "needed": needed,
                             "window_days": window_days, "not_checked": [], "accepted_since": {},
                             "references": {}}
    flagged: list[dict] = []
    usable_counts = [0]
    for deployment in known.filter(pl.col("date") == date).get_column("deployment_id").sort().to_list():
        own = known.filter(pl.col("deployment_id") == deployment)
        since = nightly.accepted_from(deployment)
        if since is not None and since <= date:
            own = own.filter(pl.col("date") >= since)
            check["accepted_since"][deployment] = since.isoformat()
        own = own.sort("date")
        dates = [d.isoformat() for d in own.get_column("date").to_list()]
        earlier = own.height - 1
        usable_counts.append(min(earlier, window_days))
        # The reference needs window_days dates before the date: until then the date is one of them.
        reference = {"status": "forming", "dates": dates} if earlier < window_days else {
            "status": "set", "dates": dates[:window_days], "metrics": {}}
        check["references"][deployment] = reference
        if earlier < needed:
            entry = {"deployment_id": deployment, "earlier_dates": earlier}
            if deployment in check["accepted_since"]:
                entry["accepted_since"] = check["accepted_since"][deployment]
            check["not_checked"].append(entry)
            continue
        for metric, (threshold_key, direction) in CHECKED.items():
            values, threshold = own.get_column(metric).to_list(), getattr(rule, threshold_key)
            today = replay(dates, values, needed, window_days, threshold, direction)[-1]
            if today:
                flagged.append({"deployment_id": deployment, "metric": metric, **today})
            if reference["status"] == "set" and metric in REFERENCE_CHECKED:
                summary, judged = replay_reference(dates, values, needed, window_days, threshold, direction)
                reference["metrics"][metric] = summary
                if judged[-1]:
                    flagged.append({"deployment_id": deployment, "metric": metric, **judged[-1]})
    check["earlier_dates"] = max(usable_counts)
    if check["earlier_dates"] >= needed:
        check["status"] = "checked"
    else:
        # nothing was compared: naming every deployment as left out would only repeat the status
        check["not_checked"] = []
    return check, flagged


def replay(dates: list[str], values: list[float | None], needed: int, window_days: int, threshold: float,
           direction: str) -> list[dict | None]:
    """One deployment's metric judged by the window date by date in order: each date's flag entry, or None.

    ``dates`` are ascending ISO dates, ``values`` the metric on them. A date is judged
    against the latest ``window_days`` earlier dates that were not flagged themselves;
    the first ``needed`` dates have too few earlier ones and are never flagged. A flag on
    the date right after a flagged one continues it: ``flagged_since`` is the first date
    of the unbroken run.

    Only the window's own flags leave the window: a date flagged against the reference
    alone stays in it. The reference is fixed, so its flags stay without that, and the
    window rule keeps answering its own question (did the metric move against the last
    week?) whatever the reference says.
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


def replay_reference(dates: list[str], values: list[float | None], needed: int, window_days: int,
                     threshold: float, direction: str) -> tuple[dict, list[dict | None]]:
    """One deployment's metric judged against its reference: ``(summary, judged)``.

    The reference is the first ``window_days`` of ``dates`` (ascending ISO dates, from
    ``accept_since`` on where that is in effect; ``values`` the metric on them): it is fixed,
    so every later date is compared with the same median and the same limit, and a drop
    that stays below it stays flagged. It needs ``needed`` non-null values among its dates,
    as a window does. ``summary`` is the reference's ``values`` (how many), ``median``,
    ``spread`` and ``limit`` (None when it has too few values, or a median of 0); ``judged``
    holds None for the reference's own dates and, for each later date, its flag entry or
    None. A flag on the date right after a reference flag continues it (``flagged_since``).
    """
    own = [v for v in values[:window_days] if v is not None]
    summary: dict[str, Any] = {"values": len(own), "median": None, "spread": None, "limit": None}
    judged: list[dict | None] = [None] * min(window_days, len(values))
    if len(own) >= needed:
        summary["median"] = statistics.median(own)
        if summary["median"] != 0:
            summary["spread"] = SPREAD_SDS * reference_noise(own) / abs(summary["median"])
            summary["limit"] = max(threshold, summary["spread"])
    for i in range(window_days, len(values)):
        found = None
        if summary["limit"] is not None and values[i] is not None:
            found = _past(values[i], summary["median"], summary["spread"], threshold, direction)
        if found:
            previous = judged[i - 1]
            found = {"rule": REFERENCE, **found, "reference_dates": dates[:window_days],
                     "flagged_since": previous["flagged_since"] if previous else dates[i]}
        judged.append(found)
    return summary, judged


def reference_noise(values: list[float]) -> float:
    """The day-to-day noise of the reference's values (in date order) as a standard deviation:
    1.4826 · MAD of their successive differences / √2.

    Not 1.4826 · MAD about their median, as the window's spread is: the reference may hold a
    decline that had already begun (a deployment that declines from its first day). A trend
    of r a day puts the values r, 2r, 3r from the middle one, so the MAD about the median
    grows with r (2r over seven dates) and a wide limit would hide the very decline. Each
    successive difference is the trend r plus the difference of two days' noise, so the MAD
    of the differences about their median drops r and is left with the noise, whose
    difference has √2 times its standard deviation. The price: one bad day in the reference
    turns two of its six differences into outliers, and while the median keeps them from
    setting the MAD, it is then read from the larger of the other four, so the limit comes
    out wider than the MAD about the median would make it (39.8 % against 17.8 % in the
    example of docs/commands.md). That delays a flag; it raises none.
    Fewer than two values have no difference: no noise is seen, and the threshold is the
    limit, as for a window of equal values.
    """
    diffs = [b - a for a, b in zip(values, values[1:])]
    if not diffs:
        return 0.0
    centre = statistics.median(diffs)
    return MAD_TO_SD * statistics.median(abs(d - centre) for d in diffs) / math.sqrt(2)


def _flag(value: float | None, window: list[float], needed: int, threshold: float, direction: str) -> dict | None:
    """The window's flag entry when ``value`` is past max(threshold, spread) in ``direction``, else None."""
    # A metric null on some earlier days (a baseline's accept length, a day without TPOT)
    # needs as many real values as the deployment needs dates.
    if value is None or len(window) < needed:
        return None
    baseline = statistics.median(window)
    if baseline == 0:
        return None
    found = _past(value, baseline, robust_spread(window, baseline), threshold, direction)
    return {"rule": WINDOW, **found} if found else None


def _past(value: float, baseline: float, spread: float, threshold: float, direction: str) -> dict | None:
    """The change of ``value`` against ``baseline`` when it is past max(threshold, spread) in
    ``direction`` (a drop or a rise), as the common part of a flag entry; else None."""
    change = (value - baseline) / baseline
    limit = max(threshold, spread)
    if (direction == "drop" and change < -limit) or (direction == "rise" and change > limit):
        return {"value": value, "baseline": baseline, "change": change, "spread": spread, "limit": limit}
    return None


def robust_spread(window: list[float], baseline: float) -> float:
    """SPREAD_SDS · 1.4826 · MAD / |baseline|, MAD = the median of |value − baseline| over the window."""
    mad = statistics.median(abs(v - baseline) for v in window)
    return SPREAD_SDS * MAD_TO_SD * mad / abs(baseline)
