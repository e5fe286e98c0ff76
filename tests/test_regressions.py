"""The nightly regression rule (issues 16, 22 and 36): enough history, past the threshold and past the
window's robust spread, a window of earlier dates that were not flagged themselves, and a fixed reference.

The rule (analyzer/decide/regression.py, docs/commands.md "Regressions"): with at
least min_history_dates earlier dates, a metric is flagged when its change
against the window's median is past max(threshold, spread), where spread =
4 · 1.4826 · MAD / median (MAD: the median of |value − median| over the window).
The window holds the latest window_days earlier dates that the window rule did not flag for
that metric, and none before accept_since once the date is on or after it.

The reference rule (issue 36): a date after the deployment's first window_days
dates (from accept_since where in effect) is also flagged when its change against
their median is past max(threshold, 4 · 1.4826 · MAD of their day-to-day
differences / √2 / median); each flag says which rule ("rule": "window" or
"reference"). Every expected number below is worked out by hand in the comments.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil

import polars as pl
import pytest
from click.testing import CliRunner

from analyzer.decide import regression
from analyzer.analysis.config import ConfigError, Nightly, Regression, load_config
from analyzer.cli import main
from analyzer.render import markdown
from analyzer.render.regressions import flag_line, status_lines
from tracebuilder import OFFSETS_10, OFFSETS_20, at, write_columns, write_table

TODAY = dt.date(2026, 11, 28)
# Five earlier days of an unchanged deployment whose numbers move by noise:
#   speedup            1.00 1.06 0.95 1.03 0.98  median 1.00  |deviations| 0 .06 .05 .03 .02  MAD .03
#                      spread 4 · 1.4826 · 0.03 / 1.00 = 0.177912
#   mean_accept_length 3.00 3.10 2.90 3.05 2.95  median 3.00  |deviations| 0 .10 .10 .05 .05  MAD .05
#                      spread 4 · 1.4826 · 0.05 / 3.00 = 0.09884
#   tpot_p99           40   44   38   50   42    median 42    |deviations| 2 2 4 8 0          MAD 2
#                      spread 4 · 1.4826 · 2 / 42 = 0.2824
NOISY = [(1.00, 3.00, 40.0), (1.06, 3.10, 44.0), (0.95, 2.90, 38.0), (1.03, 3.05, 50.0), (0.98, 2.95, 42.0)]
SPEEDUP_SPREAD, ACCEPT_SPREAD, TPOT_SPREAD = 4 * 1.4826 * 0.03, 4 * 1.4826 * 0.05 / 3, 4 * 1.4826 * 2 / 42


def day(offset: int) -> dt.date:
    """The date ``offset`` days after TODAY (negative: before it)."""
    return TODAY + dt.timedelta(days=offset)


def days(values: list[tuple], last: dt.date = TODAY, deployment: str = "spec") -> pl.DataFrame:
    """History rows of (speedup, accept length, tpot_p99) on consecutive dates ending on ``last``."""
    first = last - dt.timedelta(days=len(values) - 1)
    return pl.DataFrame(
        [{"date": first + dt.timedelta(days=i), "deployment_id": deployment, "speedup": s,
          "mean_accept_length": a, "tpot_p99": t} for i, (s, a, t) in enumerate(values)],
        schema={"date": pl.Date, "deployment_id": pl.Utf8, "speedup": pl.Float64,
                "mean_accept_length": pl.Float64, "tpot_p99": pl.Float64})


def frame(earlier: list[tuple], today: tuple, deployment: str = "spec") -> pl.DataFrame:
    """``earlier`` on the days before TODAY (the last one on the day before), then ``today``."""
    return days([*earlier, today], deployment=deployment)


def check(data: pl.DataFrame, date: dt.date = TODAY, accept_since=None, **rule) -> tuple[dict, list[dict]]:
    return regression.check_regressions(data, date, Regression(**rule), Nightly(accept_since=accept_since))


def checked(earlier: int, accepted: dict | None = None) -> dict:
    """The window part of ``regression_check`` for a checked date (see ``window_part``)."""
    return {"status": "checked", "earlier_dates": earlier, "needed": 3, "window_days": 7, "not_checked": [],
            "accepted_since": accepted or {}}


def window_part(c: dict) -> dict:
    """``regression_check`` without its ``references``: what the window rule's tests compare. The
    references are compared in the tests of the reference rule (below)."""
    return {k: v for k, v in c.items() if k != "references"}


def forming(*offsets: int, deployment: str = "spec") -> dict:
    """``references`` of a deployment whose reference is still forming: its dates so far."""
    return {deployment: {"status": "forming", "dates": isos(*offsets)}}


def isos(*offsets: int) -> list[str]:
    return [day(o).isoformat() for o in offsets]


# ---------------------------------------------------------------- too little history


@pytest.mark.parametrize("earlier, sentence", [
    (1, "Regressions: not checked — 1 earlier date in the history, 3 needed (min_history_dates)"),
    (2, "Regressions: not checked — 2 earlier dates in the history, 3 needed (min_history_dates)"),
])
def test_one_or_two_earlier_dates_are_not_checked_even_for_a_halving(earlier, sentence):
    c, flagged = check(frame(NOISY[:earlier], (0.5, 1.5, 84.0)))
    assert flagged == []
    assert c == {"status": "insufficient_history", "earlier_dates": earlier, "needed": 3, "window_days": 7,
                 "not_checked": [], "accepted_since": {}, "references": forming(*range(-earlier, 1))}
    assert status_lines(c, flagged) == [sentence]


def test_exactly_min_history_dates_is_checked():
    # 1.00 1.06 0.95: median 1.00, |deviations| 0 .06 .05, MAD .05, spread 4 · 1.4826 · .05 = 0.29652:
    # three days are a wide window, so 0.80 (−20 %) is within it and 0.60 (−40 %) is past it
    c, flagged = check(frame(NOISY[:3], (0.80, 3.0, 40.0)))
    assert (c, flagged) == (checked(3) | {"references": forming(-3, -2, -1, 0)}, [])
    c, flagged = check(frame(NOISY[:3], (0.60, 3.0, 40.0)))
    assert window_part(c) == checked(3)
    assert [(r["metric"], r["value"], r["baseline"]) for r in flagged] == [("speedup", 0.60, 1.00)]
    assert flagged[0]["change"] == pytest.approx(-0.40)
    assert flagged[0]["spread"] == pytest.approx(4 * 1.4826 * 0.05)
    assert flagged[0]["limit"] == pytest.approx(4 * 1.4826 * 0.05)
    assert flagged[0]["window_dates"] == isos(-3, -2, -1)
    # one more needed: the same history is no longer enough
    c, flagged = check(frame(NOISY[:3], (0.60, 3.0, 40.0)), min_history_dates=4)
    assert (c["status"], c["earlier_dates"], c["needed"], flagged) == ("insufficient_history", 3, 4, [])


# ---------------------------------------------------------------- five earlier dates


def test_noisy_but_unchanged_is_not_flagged():
    # speedup 0.92: −8 %, past the 5 % threshold and below every earlier day, but within the spread (17.8 %);
    # accept length 2.86: −4.7 %, within both; tpot_p99 52: +23.8 %, past 10 % and above every earlier day,
    # but within the spread (28.2 %)
    c, flagged = check(frame(NOISY, (0.92, 2.86, 52.0)))
    assert window_part(c) == checked(5)
    assert flagged == []
    assert status_lines(c, flagged) == [
        "Regressions: none — no headline metric moved past both its threshold and the spread of the window's "
        "5 earlier dates"]


def test_a_real_drop_is_flagged():
    # speedup 0.80 vs 1.00: −20 % past 17.8 %; accept length 2.40 vs 3.00: −20 % past 9.88 %;
    # tpot_p99 56 vs 42: +33.3 % past 28.2 %
    c, flagged = check(frame(NOISY, (0.80, 2.40, 56.0)))
    assert [r["metric"] for r in flagged] == ["mean_accept_length", "speedup", "tpot_p99"]
    accept, speedup, tpot = flagged
    window = isos(-5, -4, -3, -2, -1)
    assert accept == {"deployment_id": "spec", "metric": "mean_accept_length", "rule": "window", "value": 2.40,
                      "baseline": 3.00,
                      "change": pytest.approx(-0.2), "spread": pytest.approx(ACCEPT_SPREAD),
                      "limit": pytest.approx(ACCEPT_SPREAD), "window_dates": window, "excluded_flagged_dates": [],
                      "flagged_since": TODAY.isoformat()}
    assert (speedup["baseline"], speedup["change"], speedup["limit"]) == (1.00, pytest.approx(-0.2),
                                                                          pytest.approx(SPEEDUP_SPREAD))
    assert (tpot["baseline"], tpot["change"], tpot["limit"]) == (42.0, pytest.approx(14 / 42),
                                                                 pytest.approx(TPOT_SPREAD))
    assert status_lines(c, flagged) == ["Regressions: 3 flagged against the window's 5 earlier dates"]
    assert flag_line(speedup, TODAY.isoformat()) == "spec speedup 0.8 vs median 1 (-20.0%)"
    assert flag_line(tpot, TODAY.isoformat()) == "spec tpot_p99 56 vs median 42 (+33.3%)"


def test_a_quiet_window_leaves_the_threshold_as_the_limit():
    steady = [(1.0, 3.0, 40.0)] * 5          # MAD 0, spread 0: the limit is the threshold itself
    assert check(frame(steady, (0.96, 3.0, 40.0)))[1] == []          # −4 %, within 5 %
    flagged = check(frame(steady, (0.94, 3.0, 40.0)))[1]             # −6 %, past 5 %
    assert [(r["metric"], r["spread"], r["limit"]) for r in flagged] == [("speedup", 0.0, 0.05)]
    assert flagged[0]["change"] == pytest.approx(-0.06)


def test_the_window_is_the_latest_window_days_dates():
    # five old days at 0.5, then four at 1.0 (a rise: speedup is checked for drops only, so nothing is
    # flagged on the way); a 4-date window holds the four 1.0s: 0.9 is −10 % with MAD 0, past 5 %
    earlier = [(0.5, 3.0, 40.0)] * 5 + [(1.0, 3.0, 40.0)] * 4
    c, flagged = check(frame(earlier, (0.9, 3.0, 40.0)), window_days=4)
    assert c["earlier_dates"] == 4                     # nine in the history, four in the window
    assert [(r["metric"], r["baseline"], r["limit"], r["window_dates"]) for r in flagged] == [
        ("speedup", 1.0, 0.05, isos(-4, -3, -2, -1))]
    # a 9-date window takes them in: the median of five 0.5s and four 1.0s is 0.5, so 0.9 is a rise
    assert check(frame(earlier, (0.9, 3.0, 40.0)), window_days=9)[1] == []


# ---------------------------------------------------------------- one bad day, a lasting drop


def test_one_high_day_does_not_widen_the_spread():
    # speedup 1.60 instead of 1.06 on the second day: a rise, so not flagged and in the window. The old
    # spread (1.60 − 0.95) / 1.00 = 65 % would have hidden any drop; the MAD stays .03 (|deviations|
    # 0 .60 .05 .03 .02) and the spread 17.8 %, so 0.80 (−20 %) is still flagged
    earlier = [(1.00, 3.0, 40.0), (1.60, 3.0, 40.0), (0.95, 3.0, 40.0), (1.03, 3.0, 40.0), (0.98, 3.0, 40.0)]
    (flag,) = check(frame(earlier, (0.80, 3.0, 40.0)))[1]
    assert (flag["metric"], flag["baseline"]) == ("speedup", 1.0)
    assert flag["spread"] == pytest.approx(SPEEDUP_SPREAD)


LASTING = NOISY + [(0.80, 3.0, 40.0)] * 4          # five normal days, then −20 % for four days
DROP = [day(o) for o in (-3, -2, -1, 0)]            # the four days of the drop, the last is TODAY


def test_a_lasting_drop_stays_flagged_every_day():
    # each day of the drop is compared with the five normal days: the drop's earlier days were flagged and
    # stay out of the window, so median 1.00, MAD .03, spread 17.8 % and change −20 % every day. (The rule
    # before issue 22 kept them in: on the second day 1.00 1.06 0.95 1.03 0.98 0.80 has median 0.99 and
    # spread (1.06 − 0.80) / 0.99 = 26 %, so −19.2 % passed, and it flagged the first day only.)
    data = days(LASTING)
    for n, date in enumerate(DROP):
        c, flagged = check(data, date)
        # the dates before it, at most 7 (the window of accept length, which nothing flagged)
        assert window_part(c) == checked(min(5 + n, 7))
        (flag,) = flagged
        assert (flag["metric"], flag["value"], flag["baseline"]) == ("speedup", 0.80, 1.00)
        assert (flag["change"], flag["spread"]) == (pytest.approx(-0.2), pytest.approx(SPEEDUP_SPREAD))
        assert flag["window_dates"] == isos(-8, -7, -6, -5, -4)
        assert flag["excluded_flagged_dates"] == [d.isoformat() for d in DROP[:n]]
        assert flag["flagged_since"] == DROP[0].isoformat()
    assert flag_line(flagged[0], TODAY.isoformat()) == (
        f"spec speedup 0.8 vs median 1 (-20.0%): still below the median of the window before {DROP[0]}, "
        f"flagged since then")


def test_one_bad_day_is_flagged_once_and_leaves_the_window():
    # day −2 is an outlier (0.50, flagged); day −1 is back to normal (1.00 vs the five normal days: not
    # flagged, and nothing says "still"); today 0.80 is compared with the five normal days and day −1,
    # not with the outlier: 1.00 1.06 0.95 1.03 0.98 1.00, median 1.00, |deviations| 0 .06 .05 .03 .02 0,
    # MAD (.02 + .03) / 2 = .025, spread 4 · 1.4826 · .025 = 14.8 %, change −20 %: flagged, as a new flag.
    # With the outlier in the window the old spread (1.06 − 0.50) / 1.00 = 56 % would have hidden it.
    data = days(NOISY + [(0.50, 3.0, 40.0), (1.00, 3.0, 40.0), (0.80, 3.0, 40.0)])
    assert [r["flagged_since"] for r in check(data, day(-2))[1]] == [day(-2).isoformat()]
    c, flagged = check(data, day(-1))
    assert (window_part(c), flagged) == (checked(6), [])
    c, (flag,) = check(data, TODAY)
    assert flag["window_dates"] == isos(-7, -6, -5, -4, -3, -1)
    assert flag["excluded_flagged_dates"] == isos(-2)
    assert flag["spread"] == pytest.approx(4 * 1.4826 * 0.025)
    # Today is also the first date after the reference, days −7 to −1, which holds the outlier. Its
    # differences +.06 −.11 +.08 −.05 −.48 +.50 have the median .005 and |d − .005| .055 .115 .075 .055 .485
    # .495: the median keeps the outlier's two differences from setting the MAD, but it is read from the
    # larger of the other four, (.075 + .115) / 2 = .095, so the spread is 4 · 1.4826 · .095 / √2 = 39.8 %
    # and −20 % is not flagged against the reference (the MAD about its median, .03, would have given 17.8 %)
    assert c["references"]["spec"]["metrics"]["speedup"] == {
        "values": 7, "median": 1.0, "spread": pytest.approx(4 * 1.4826 * 0.095 / 2 ** 0.5),
        "limit": pytest.approx(4 * 1.4826 * 0.095 / 2 ** 0.5)}
    assert flag["flagged_since"] == TODAY.isoformat()
    assert flag_line(flag, TODAY.isoformat()) == "spec speedup 0.8 vs median 1 (-20.0%)"


def test_accept_since_makes_the_new_level_the_normal():
    # accept_since = the drop's first day: before it, nothing changes; from it on, the dates before it leave
    # the window, so the drop's first three days have 0, 1 and 2 earlier dates (not checked) and the fourth
    # is compared with three days at 0.80: median 0.80, MAD 0, change 0, nothing flagged
    data = days(LASTING)
    since = DROP[0].isoformat()
    c, flagged = check(data, day(-4), accept_since=DROP[0])
    assert (window_part(c), flagged) == (checked(4), [])      # a normal day before it
    for n, date in enumerate(DROP[:3]):
        c, flagged = check(data, date, accept_since=DROP[0])
        assert flagged == []
        assert c == {"status": "insufficient_history", "earlier_dates": n, "needed": 3, "window_days": 7,
                     "not_checked": [], "accepted_since": {"spec": since},
                     "references": forming(*range(-3, -2 + n))}
    assert status_lines(c, flagged) == [
        f"Regressions: not checked — 2 earlier dates in the history since accept_since {since}, "
        f"3 needed (min_history_dates)"]
    c, flagged = check(data, TODAY, accept_since=DROP[0])
    assert (c, flagged) == (checked(3, {"spec": since}) | {"references": forming(-3, -2, -1, 0)}, [])
    # a drop below the new level is a regression again: 0.60 against 0.80 0.80 0.80 is −25 %
    lower = days(LASTING[:-1] + [(0.60, 3.0, 40.0)])
    (flag,) = check(lower, TODAY, accept_since=DROP[0])[1]
    assert (flag["baseline"], flag["window_dates"]) == (0.80, [d.isoformat() for d in DROP[:3]])


def test_accept_since_of_one_deployment_leaves_the_others_alone():
    data = pl.concat([days(LASTING), days(LASTING, deployment="other")])
    c, flagged = check(data, DROP[1], accept_since={"spec": DROP[0]})
    since = DROP[0].isoformat()
    assert c == {"status": "checked", "earlier_dates": 6, "needed": 3, "window_days": 7,
                 "not_checked": [{"deployment_id": "spec", "earlier_dates": 1, "accepted_since": since}],
                 "accepted_since": {"spec": since},
                 "references": forming(-8, -7, -6, -5, -4, -3, -2, deployment="other") | forming(-3, -2)}
    assert [(r["deployment_id"], r["flagged_since"]) for r in flagged] == [("other", since)]
    assert status_lines(c, flagged) == [
        "Regressions: 1 flagged against the window's 6 earlier dates",
        f"Regressions: not checked for spec (1 earlier date since accept_since {since}); 3 needed "
        f"(min_history_dates)"]


def test_a_backfilled_date_is_compared_with_its_own_earlier_dates_only():
    # four normal days, TODAY at 0.80, and three later days at 0.80 already in the history (a backfill of
    # TODAY after them). TODAY's window is the four days before it: 1.00 1.06 0.95 1.03, median 1.015,
    # |deviations| .015 .045 .065 .015, MAD .03, spread 4 · 1.4826 · .03 / 1.015 = 17.5 %; change
    # 0.80 / 1.015 − 1 = −21.2 %: flagged, exactly as if the later days did not exist
    data = days(NOISY[:4] + [(0.80, 3.0, 40.0)] * 4, last=day(3))
    c, flagged = check(data, TODAY)
    assert (c, flagged) == check(data.filter(pl.col("date") <= TODAY), TODAY)
    assert c == checked(4) | {"references": forming(-4, -3, -2, -1, 0)}
    (flag,) = flagged
    assert flag["window_dates"] == isos(-4, -3, -2, -1)
    assert flag["baseline"] == pytest.approx(1.015)
    assert flag["spread"] == pytest.approx(4 * 1.4826 * 0.03 / 1.015)
    assert flag["change"] == pytest.approx(0.80 / 1.015 - 1)


def test_a_changed_threshold_applies_to_the_past():
    # with max_speedup_drop = 0.25 the drop's first day is not flagged, so it is in the window of the
    # second: 1.00 1.06 0.95 1.03 0.98 0.80, median 0.99; −20 % is within 25 % on all four days
    data = days(LASTING)
    assert [check(data, d, max_speedup_drop=0.25)[1] for d in DROP] == [[], [], [], []]
    # a 15 % threshold: the spread (17.8 %) is the limit again and all four are flagged
    assert [len(check(data, d, max_speedup_drop=0.15)[1]) for d in DROP] == [1, 1, 1, 1]


# ---------------------------------------------------------------- per deployment and per metric


def test_a_deployment_with_too_few_dates_of_its_own_is_named():
    data = pl.concat([frame(NOISY, (0.80, 3.0, 40.0)), frame(NOISY[-1:], (0.10, 0.5, 400.0), "new")])
    c, flagged = check(data)
    assert c["status"] == "checked" and c["earlier_dates"] == 5
    assert c["not_checked"] == [{"deployment_id": "new", "earlier_dates": 1}]
    assert [(r["deployment_id"], r["metric"]) for r in flagged] == [("spec", "speedup")]
    assert status_lines(c, flagged) == [
        "Regressions: 1 flagged against the window's 5 earlier dates",
        "Regressions: not checked for new (1 earlier date); 3 needed (min_history_dates)"]


def test_a_day_of_new_deployments_only_is_not_checked():
    # five dates of "old" in the history, but the day's only deployment has none of its own: nothing was
    # compared, so the run says "not checked", not "none"
    data = pl.concat([days(NOISY, last=day(-1), deployment="old"), frame([], (0.5, 1.0, 90.0), "new")])
    c, flagged = check(data)
    assert (c, flagged) == ({"status": "insufficient_history", "earlier_dates": 0, "needed": 3, "window_days": 7,
                             "not_checked": [], "accepted_since": {}, "references": forming(0, deployment="new")},
                            [])
    assert status_lines(c, flagged) == [
        "Regressions: not checked — 0 earlier dates in the history, 3 needed (min_history_dates)"]


def test_a_metric_with_too_few_values_in_the_window_is_skipped():
    # tpot_p99 only on the last two earlier days: two values are not enough for a median and a spread
    earlier = [(s, a, t if i >= 3 else None) for i, (s, a, t) in enumerate(NOISY)]
    assert check(frame(earlier, (1.0, 3.0, 400.0)))[1] == []
    # a baseline deployment has no accept length or speedup at all: nothing to flag, nothing fails
    base = [(None, None, t) for _, _, t in NOISY]
    assert check(frame(base, (None, None, 42.0), "base"))[1] == []


# ---------------------------------------------------------------- the reference: a slow decline
#
# The window follows a slow decline down: against a 7-date median a decline of r a day is about 4r, while
# the window's spread grows to 4 · 1.4826 · 2r ≈ 11.9r, so the window alone never flags it (issue 36). The
# reference is the deployment's first window_days (7) dates, from accept_since where that is in effect;
# a later date is flagged when its change against the reference's median is past max(threshold, spread),
# spread = 4 · 1.4826 · MAD of the reference's day-to-day differences / √2 / |median|.
#
# The days below carry the noise of NOISY above, repeated: day n (n = 1, 2, ...) has speedup
# level · C[(n − 1) % 5], C = 1.00 1.06 0.95 1.03 0.98, accept length A[(n − 1) % 5] and tpot_p99
# T[(n − 1) % 5]. A level of 1 on the first seven days gives the reference
#   speedup   1.00 1.06 0.95 1.03 0.98 1.00 1.06   median 1.00
#             differences +.06 −.11 +.08 −.05 +.02 +.06, their median (.02 + .06) / 2 = .04,
#             |difference − .04| .02 .15 .04 .09 .02 .02, MAD (.02 + .04) / 2 = .03
#             spread 4 · 1.4826 · .03 / √2 / 1.00 = 12.58 %: a day below 0.8742 is flagged
#   accept    3.00 3.10 2.90 3.05 2.95 3.00 3.10   median 3.00
#             differences +.10 −.20 +.15 −.10 +.05 +.10, median .075, |d − .075| .025 .275 .075 .175 .025
#             .025, MAD (.025 + .075) / 2 = .05, spread 4 · 1.4826 · .05 / √2 / 3 = 6.99 %
#   tpot_p99  40 44 38 50 42 40 44                 median 42
#             differences +4 −6 +12 −8 −2 +4, median 1, |d − 1| 3 7 11 9 3 3, MAD (3 + 7) / 2 = 5,
#             spread 4 · 1.4826 · 5 / √2 / 42 = 49.9 %
# (1.4826 · MAD about the median would be the same .03 for the speedup here: these days carry no trend.)

C = [s for s, _, _ in NOISY]
FIRST = dt.date(2026, 11, 1)
REF_SPEEDUP, REF_ACCEPT, REF_TPOT = (4 * 1.4826 * 0.03 / 2 ** 0.5, 4 * 1.4826 * 0.05 / 2 ** 0.5 / 3,
                                     4 * 1.4826 * 5 / 2 ** 0.5 / 42)


def nth(n: int) -> dt.date:
    """Day n of the histories below (day 1 is FIRST)."""
    return FIRST + dt.timedelta(days=n - 1)


def cycled(levels: list[float], deployment: str = "spec") -> pl.DataFrame:
    """Day n has speedup levels[n − 1] · C[(n − 1) % 5] and NOISY's accept length and tpot_p99."""
    rows = [(level * NOISY[i % 5][0], NOISY[i % 5][1], NOISY[i % 5][2]) for i, level in enumerate(levels)]
    return days(rows, last=nth(len(rows)), deployment=deployment)


def judged(data: pl.DataFrame, accept_since=None) -> dict[int, list[tuple]]:
    """Day n → (rule, metric, flagged_since as a day number) of every flag on day n, for each day of ``data``."""
    out = {}
    for n in range(1, data.height + 1):
        flagged = check(data, nth(n), accept_since=accept_since)[1]
        out[n] = [(r["rule"], r["metric"], (dt.date.fromisoformat(r["flagged_since"]) - FIRST).days + 1)
                  for r in flagged]
    return out


def flagged_days(result: dict[int, list[tuple]], rule: str) -> list[int]:
    return [n for n, flags in result.items() if any(f[0] == rule for f in flags)]


def reference_set(first: int = 1, *, speedup=(1.0, REF_SPEEDUP), accept=(3.0, REF_ACCEPT),
                  tpot=(42.0, REF_TPOT)) -> dict:
    """A ``references`` entry: days first .. first + 6 and, per metric, (median, spread); the limit is the
    larger of the spread and the default threshold (5 %, 5 %, 10 %)."""
    def metric(median, spread, threshold):
        return {"values": 7, "median": pytest.approx(median), "spread": pytest.approx(spread),
                "limit": pytest.approx(max(spread, threshold))}
    # tpot_p99 is judged by the window alone (regression.REFERENCE_CHECKED): the reference has no entry for it
    return {"status": "set", "dates": [nth(n).isoformat() for n in range(first, first + 7)],
            "metrics": {"mean_accept_length": metric(*accept, 0.05), "speedup": metric(*speedup, 0.05)}}


def test_the_reference_noise_is_not_widened_by_a_trend():
    # a decline of 0.02 a day inside the reference, no noise: 1.00 0.98 ... 0.88. Every day-to-day difference
    # is −0.02, so the MAD of the differences is 0 and the limit stays the threshold. The MAD about the
    # median would have grown with the trend: median 0.94, |deviations| .06 .04 .02 0 .02 .04 .06, MAD .04,
    # 4 · 1.4826 · .04 / .94 = 25.2 %, hiding any drop smaller than that
    trend = [1.00 - 0.02 * i for i in range(7)]
    assert regression.reference_noise(trend) == pytest.approx(0.0, abs=1e-12)
    assert regression.robust_spread(trend, 0.94) == pytest.approx(4 * 1.4826 * 0.04 / 0.94)
    # the same trend on top of the noise above: the differences shift by −0.02 each, their MAD stays .03
    noisy = [c - 0.02 * i for i, c in enumerate(C + C[:2])]
    assert regression.reference_noise(noisy) == pytest.approx(1.4826 * 0.03 / 2 ** 0.5)
    assert regression.reference_noise(C + C[:2]) == pytest.approx(1.4826 * 0.03 / 2 ** 0.5)
    # one value has no difference: no noise seen, the threshold is the limit
    assert regression.reference_noise([1.0]) == 0.0


def test_a_stable_noisy_history_has_no_reference_flag():
    # 28 days at level 1 with the noise above: the reference is days 1-7 (speedup limit 12.58 %, the lowest
    # later speedup 0.95 is −5 %; accept length 2.90 is −3.3 % against 6.99 %; tpot_p99 is the window's alone),
    # and the window flags nothing either
    data = cycled([1.0] * 28)
    assert judged(data) == {n: [] for n in range(1, 29)}
    for n in (8, 28):
        c, flagged = check(data, nth(n))
        assert c["references"] == {"spec": reference_set()}
        assert status_lines(c, flagged) == [
            "Regressions: none — no headline metric moved past both its threshold and the spread of the window's "
            "7 earlier dates, nor of its reference"]
    # day 7 is the reference's last date: it is still forming, and the line does not mention it
    c, flagged = check(data, nth(7))
    assert c["references"] == {"spec": {"status": "forming", "dates": [nth(n).isoformat() for n in range(1, 8)]}}
    assert status_lines(c, flagged) == [
        "Regressions: none — no headline metric moved past both its threshold and the spread of the window's "
        "6 earlier dates"]


@pytest.mark.parametrize("rate, first_day", [(0.01, 11), (0.02, 6), (0.03, 6)])
def test_a_decline_after_a_stable_reference_is_flagged_by_the_reference(rate, first_day):
    # seven days at level 1 (the reference), then a compound decline: decline day k (day 7 + k) has level
    # (1 − rate)^k, times the noise C[(k + 1) % 5] = 0.95 1.03 0.98 1.00 1.06 for k = 1 2 3 4 5, and again.
    # It is flagged on the first day below 0.8742 (−12.58 %):
    #   2 % a day: k = 1..5: 0.931 0.989 0.922 0.922 0.958; k = 6: 0.98^6 · 0.95 = 0.8416 (−15.8 %): day 6
    #   3 % a day: k = 1..5: 0.922 0.969 0.894 0.885 0.910; k = 6: 0.97^6 · 0.95 = 0.7913 (−20.9 %): day 6
    #             (the noise puts day 5 6 % up, so 3 % is first flagged on the same day as 2 %)
    #   1 % a day: (1 − 0.99^k · C) stays within 12.58 % up to k = 10 (0.99^8 · 0.98 = 0.9043, 0.99^9 · 1.00
    #             = 0.9135, 0.99^10 · 1.06 = 0.9582); k = 11: 0.99^11 · 0.95 = 0.8506 (−14.9 %): day 11
    # The window rule never flags any of them over the 21 days of decline: it follows them down.
    levels = [1.0] * 7 + [(1 - rate) ** k for k in range(1, 22)]
    result = judged(cycled(levels))
    first = 7 + first_day
    assert flagged_days(result, "window") == []
    assert flagged_days(result, "reference")[0] == first
    c, flagged = check(cycled(levels), nth(first))
    (flag,) = flagged
    assert flag == {"deployment_id": "spec", "metric": "speedup", "rule": "reference",
                    "value": pytest.approx((1 - rate) ** first_day * 0.95), "baseline": 1.0,
                    "change": pytest.approx((1 - rate) ** first_day * 0.95 - 1),
                    "spread": pytest.approx(REF_SPEEDUP), "limit": pytest.approx(REF_SPEEDUP),
                    "reference_dates": [nth(n).isoformat() for n in range(1, 8)], "flagged_since": nth(first).isoformat()}
    assert c["references"] == {"spec": reference_set()}


def test_a_decline_of_two_percent_a_day_stays_flagged():
    # the 2 % decline above: decline day 6 (day 13) is flagged, day 7 (day 14) is 0.98^7 · 1.03 = 0.8942
    # (−10.6 %, within 12.58 %: the noise lifts it), and from day 8 (day 15: 0.98^8 · 0.98 = 0.8338, −16.6 %)
    # on every day is below 0.8742 (the highest, decline day 10 = day 17: 0.98^10 · 1.06 = 0.8661, −13.4 %):
    # one flag run from day 15 to day 28, flagged_since day 15 on each
    result = judged(cycled([1.0] * 7 + [0.98 ** k for k in range(1, 22)]))
    assert flagged_days(result, "reference") == [13, *range(15, 29)]
    assert result[13] == [("reference", "speedup", 13)]
    assert all(result[n] == [("reference", "speedup", 15)] for n in range(15, 29))


@pytest.mark.parametrize("rate, first_day", [(0.01, 13), (0.02, 13), (0.03, 8)])
def test_a_decline_from_the_first_day_is_flagged_eventually(rate, first_day):
    # No stable period: day n has level (1 − rate)^n from day 1. The reference (days 1-7) holds the decline.
    # 2 % a day: 0.98 1.018 0.8941 0.9500 0.8858 0.8858 0.9202, median 0.9202 (= 0.98^7 · 1.06, day 7);
    #   differences +.0380 −.1239 +.0559 −.0642 .0000 +.0344, their median (0 + .0344) / 2 = .0172,
    #   |d − .0172| .0208 .1411 .0387 .0814 .0172 .0172, MAD (.0208 + .0387) / 2 = .0298,
    #   spread 4 · 1.4826 · .0298 / √2 / .9202 = 13.6 %: flagged below .9202 · (1 − .136) = .7953;
    #   days 8-12: .8082 .8588 .8007 .8007 .8318 (0.98^n · C); day 13: 0.98^13 · 0.95 = .7306 (−20.6 %)
    # (the MAD about the median would be 4 · 1.4826 · .0344 / .9202 = 22.2 %: first flagged on day 18,
    # 0.98^18 · 0.95 = .6604, below .9202 · (1 − .222) = .7164)
    # 3 % a day: median 0.97^3 · 0.95 = .8670, differences' MAD .0286, spread 13.85 %; day 8: 0.97^8 · 0.95
    #   = .7446 (−14.1 %): flagged at once
    # 1 % a day: median 0.99^7 · 1.06 = .9880, spread 12.8 %, flagged below .8611; days 8-12: .8766 .9409
    #   .8863 .8953 .9396; day 13: 0.99^13 · 0.95 = .8336 (−15.6 %)
    levels = [(1 - rate) ** n for n in range(1, 29)]
    result = judged(cycled(levels))
    assert flagged_days(result, "window") == []
    assert flagged_days(result, "reference")[0] == first_day
    (flag,) = check(cycled(levels), nth(first_day))[1]
    median = {0.01: 0.99 ** 7 * 1.06, 0.02: 0.98 ** 7 * 1.06, 0.03: 0.97 ** 3 * 0.95}[rate]
    value = (1 - rate) ** first_day * C[(first_day - 1) % 5]
    assert (flag["rule"], flag["baseline"], flag["change"]) == (
        "reference", pytest.approx(median), pytest.approx(value / median - 1))
    if rate == 0.02:
        diffs = [0.98 ** (n + 1) * C[n % 5] - 0.98 ** n * C[(n - 1) % 5] for n in range(1, 7)]
        centre = (diffs[4] + diffs[5]) / 2                      # 0 and +.0344, the middle two
        mad = (abs(diffs[0] - centre) + abs(diffs[2] - centre)) / 2
        assert mad == pytest.approx(0.0298, abs=5e-5)
        assert flag["spread"] == pytest.approx(4 * 1.4826 * mad / 2 ** 0.5 / median)


def test_a_one_day_drop_that_comes_back_is_not_flagged_by_the_reference_once_it_recovers():
    # ten days at level 1, day 11 at 0.70 (C = 1.00 on day 11: −30 %), then level 1 again: day 11 is flagged
    # by both rules; day 12 (1.06) and day 13 (0.95, −5 %) are not flagged by either, and a later drop would
    # start a new flag run
    result = judged(cycled([1.0] * 10 + [0.7] + [1.0] * 3))
    assert result[11] == [("window", "speedup", 11), ("reference", "speedup", 11)]
    assert {n: flags for n, flags in result.items() if flags} == {11: result[11]}
    (window, reference) = check(cycled([1.0] * 10 + [0.7] + [1.0] * 3), nth(11))[1]
    assert (reference["baseline"], reference["change"]) == (1.0, pytest.approx(-0.3))


def test_a_step_drop_that_stays_is_flagged_every_day_by_the_reference():
    # ten days at level 1, then level 0.8 from day 11 to day 28: every day is 0.8 · C, at most 0.8 · 1.06 =
    # 0.848 (−15.2 %), below 0.8742, so the reference flags all 18 days, as one run since day 11.
    # The window lets the 6 % days through: on day 12 (0.848) its window is days 4-10 (day 11 was flagged),
    # 1.03 .98 1.00 1.06 .95 1.03 .98, median 1.00, |deviations| .03 .02 0 .06 .05 .03 .02, MAD .03,
    # spread 4 · 1.4826 · .03 = 17.8 %: −15.2 % is within it
    data = cycled([1.0] * 10 + [0.8] * 18)
    result = judged(data)
    assert flagged_days(result, "reference") == list(range(11, 29))
    assert all(("reference", "speedup", 11) in result[n] for n in range(11, 29))
    assert result[12] == [("reference", "speedup", 11)]
    c, flagged = check(data, nth(28))
    ref = next(r for r in flagged if r["rule"] == "reference")
    # day 28 has C[27 % 5] = 0.95: 0.76, −24 %
    assert (ref["value"], ref["change"], ref["flagged_since"]) == (
        pytest.approx(0.76), pytest.approx(-0.24), nth(11).isoformat())


def test_accept_since_moves_the_reference():
    # ten days at level 1, then level 0.8 from day 11, accept_since = day 11. From day 11 on, the reference is
    # days 11-17 (forming until then): speedup 0.8 · C, median 0.80, MAD of the differences 0.8 · .03, spread
    # 4 · 1.4826 · .024 / √2 / 0.80 = 12.58 % again (the rule is scale-free). The new level is the normal:
    since = nth(11)
    level = [1.0] * 10 + [0.8] * 18
    assert judged(cycled(level), accept_since=since) == {n: [] for n in range(1, 29)}
    c = check(cycled(level), nth(17), accept_since=since)[0]
    assert c["references"] == {"spec": {"status": "forming", "dates": [nth(n).isoformat() for n in range(11, 18)]}}
    c = check(cycled(level), nth(18), accept_since=since)[0]
    assert c["references"] == {"spec": reference_set(11, speedup=(0.8, REF_SPEEDUP))}
    # a date before accept_since (a backfill) keeps the first reference: day 10 is judged against days 1-7
    assert check(cycled(level), nth(10), accept_since=since)[0]["references"] == {"spec": reference_set()}
    # a decline of 2 % a day from day 18 is flagged against the new reference, on its sixth day as after the
    # first one (the noise has the same phase: day 18 has C = 0.95): day 23, 0.8 · 0.98^6 · 0.95 = 0.6732,
    # −15.8 % against 0.80
    declining = cycled([1.0] * 10 + [0.8] * 7 + [0.8 * 0.98 ** k for k in range(1, 12)])
    result = judged(declining, accept_since=since)
    assert flagged_days(result, "reference")[0] == 23
    assert flagged_days(result, "window") == []
    (flag,) = check(declining, nth(23), accept_since=since)[1]
    assert (flag["baseline"], flag["change"], flag["reference_dates"]) == (
        pytest.approx(0.8), pytest.approx(0.98 ** 6 * 0.95 - 1), [nth(n).isoformat() for n in range(11, 18)])


def test_the_check_names_each_deployment_s_reference_or_why_there_is_none():
    # "spec": nine days at level 1 (reference days 1-7, as above); "new": its first two dates (forming);
    # "base": a baseline, no accept length or speedup: no values, no median (its tpot_p99 is the window's)
    data = pl.concat([cycled([1.0] * 9), days([(1.0, 3.0, 40.0)] * 2, last=nth(9), deployment="new"),
                      days([(None, None, t) for _, _, t in NOISY + NOISY[:4]], last=nth(9), deployment="base")])
    c, flagged = check(data, nth(9))
    assert flagged == []
    no_values = {"values": 0, "median": None, "spread": None, "limit": None}
    assert c["references"] == {
        "base": {"status": "set", "dates": [nth(n).isoformat() for n in range(1, 8)],
                 "metrics": {"mean_accept_length": no_values, "speedup": no_values}},
        "new": {"status": "forming", "dates": [nth(8).isoformat(), nth(9).isoformat()]},
        "spec": reference_set()}
    # the reference needs min_history_dates values among its dates, as a window does: speedup on two of
    # seven is too few
    sparse = cycled([1.0] * 9).with_columns(
        pl.when(pl.col("date") <= nth(5)).then(None).otherwise(pl.col("speedup")).alias("speedup"))
    assert check(sparse, nth(9))[0]["references"]["spec"]["metrics"]["speedup"] == {
        "values": 2, "median": None, "spread": None, "limit": None}



# ---------------------------------------------------------------- config


def test_min_history_dates_is_configurable(tmp_path):
    path = tmp_path / "gates.toml"
    path.write_text("[regression]\nmin_history_dates = 5\nwindow_days = 5\n")
    rule = load_config(path).regression
    assert (rule.min_history_dates, rule.window_days) == (5, 5)
    assert regression.check_regressions(frame(NOISY[:4], (0.5, 1.0, 90.0)), TODAY, rule)[0]["status"] == \
        "insufficient_history"
    assert regression.check_regressions(frame(NOISY, (0.5, 1.0, 90.0)), TODAY, rule)[0]["status"] == "checked"


@pytest.mark.parametrize("text, key, message", [
    ("[regression]\nmin_history_dates = 8\n", "regression.min_history_dates",
     "expected at most window_days (7), found 8"),
    ("[regression]\nwindow_days = 2\n", "regression.window_days",
     "2 is below min_history_dates (3, the default), so nothing could ever be checked; set min_history_dates too"),
    ("[regression]\nmin_history_dates = 0\n", "regression.min_history_dates", "expected an integer of at least 1"),
    ("[regression]\nmin_history_dates = 2.5\n", "regression.min_history_dates", "expected an integer"),
])
def test_bad_min_history_dates_names_file_and_key(tmp_path, text, key, message):
    path = tmp_path / "gates.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: {key}: {message}")
    assert "\n" not in str(err.value)
    # and the CLI turns it into one line and exit 2, no traceback
    result = CliRunner().invoke(main, ["nightly", str(tmp_path), "--date", "2026-11-28", "--out",
                                       str(tmp_path / "out"), "--config", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [f"Error: {path}: {key}: {err.value.problem}"]


# ---------------------------------------------------------------- rendering


def doc_with(c: dict, flagged: list[dict], date: dt.date = TODAY) -> dict:
    return {"date": date.isoformat(), "regression_check": c, "regressions": flagged}


def test_markdown_says_not_checked_and_never_none_without_history():
    c, flagged = check(frame(NOISY[:1], (0.5, 1.5, 84.0)))
    assert markdown._regressions(doc_with(c, flagged)) == (
        "## Regressions\n\nNot checked — 1 earlier date in the history, 3 needed (min_history_dates).\n")


def test_markdown_lists_the_flags_and_their_windows():
    c, flagged = check(days(LASTING), DROP[2])
    text = markdown._regressions(doc_with(c, flagged, DROP[2]))
    assert text.startswith(
        "## Regressions\n\n1 flagged against the window's 7 earlier dates.\n\n"
        f"- spec speedup 0.8 vs median 1 (-20.0%): still below the median of the window before {DROP[0]}, "
        "flagged since then\n\n")
    assert f"| spec | speedup | 1.000 | 17.8% | 17.8% | {day(-8)} – {day(-4)} (5) | 2 |" in text


def test_a_reference_flag_in_words():
    # the 2 % decline after a stable reference: day 15 starts the flag run (0.98^8 · 0.98 = 0.8338, −16.6 %),
    # day 16 continues it (0.98^9 · 1.00 = 0.8337, −16.6 %)
    data = cycled([1.0] * 7 + [0.98 ** k for k in range(1, 22)])
    c, flagged = check(data, nth(15))
    assert status_lines(c, flagged) == ["Regressions: 1 flagged against the reference"]
    assert flag_line(flagged[0], nth(15).isoformat()) == (
        "spec speedup 0.8337: 16.6% below the reference (median of 2026-11-01..2026-11-07: 1)")
    c, flagged = check(data, nth(16))
    assert flag_line(flagged[0], nth(16).isoformat()) == (
        "spec speedup 0.8337: 16.6% below the reference (median of 2026-11-01..2026-11-07: 1), flagged since "
        "2026-11-15")
    # a rise of tpot_p99: day 11 at 84, twice the window's median 42 (days 4-10: 50 42 40 44 38 50 42): +100 %,
    # past its limit. The reference judges drops of accept length and speedup only, so the window flags it alone
    rise = pl.concat([cycled([1.0] * 10), days([(1.0, 3.0, 84.0)], last=nth(11))])
    flags = [r for r in check(rise, nth(11))[1] if r["metric"] == "tpot_p99"]
    assert [r["rule"] for r in flags] == ["window"]
    assert flag_line(flags[0], nth(11).isoformat()) == "spec tpot_p99 84 vs median 42 (+100.0%)"


def test_markdown_lists_window_and_reference_flags_apart():
    # the one-day drop to 0.70 on day 11: the window (days 4-10: 1.03 .98 1.00 1.06 .95 1.03 .98, median
    # 1.00, MAD .03, spread 17.8 %) and the reference (days 1-7, spread 12.58 %) both flag it
    c, flagged = check(cycled([1.0] * 10 + [0.7] + [1.0] * 3), nth(11))
    assert markdown._regressions(doc_with(c, flagged, nth(11))) == (
        "## Regressions\n\n1 flagged against the window's 7 earlier dates, 1 against the reference.\n\n"
        "- spec speedup 0.7 vs median 1 (-30.0%)\n"
        "- spec speedup 0.7: 30.0% below the reference (median of 2026-11-01..2026-11-07: 1)\n\n"
        "Against the window, each change is against the median of its window, the latest earlier dates not "
        "flagged themselves, and past its limit: the larger of its threshold and the window's spread, "
        "4 × 1.4826 × MAD / median.\n\n"
        "| deployment | metric | median before | spread | limit | window | flagged dates left out |\n"
        "|---|---|---|---|---|---|---|\n"
        "| spec | speedup | 1.000 | 17.8% | 17.8% | 2026-11-04 – 2026-11-10 (7) | 0 |\n\n"
        "Against the reference, each change is against the median of the deployment's first window_days dates "
        "(from accept_since, where that is in effect) and past its limit: the larger of its threshold and the "
        "reference's spread, 4 × 1.4826 × MAD of its day-to-day differences / √2 / median.\n\n"
        "| deployment | metric | reference median | spread | limit | reference |\n"
        "|---|---|---|---|---|---|\n"
        "| spec | speedup | 1.000 | 12.6% | 12.6% | 2026-11-01 – 2026-11-07 (7) |\n")


# ---------------------------------------------------------------- end to end

DATES = [f"2026-11-{d}" for d in range(20, 29)]
LOOSE = "[gates.latency]\nttft_p99_ms = 1e9\ntpot_p95_ms = 1e9\nmax_stall_p99_ms = 1e9\n"


def write_days(root, spec_ms_by_day: dict[str, float]):
    """Per day: 10 eagle requests of one round each (γ = 4, 2 accepted each) with steps of the
    day's ms on average, and 20 baseline rounds of 10 ms on average of 10 requests (enough for a
    usable t0: the [evidence] floors, and for a verdict: min_requests). The durations vary
    around their means by offsets adding up to 0 (OFFSETS_10, OFFSETS_20), so the speedup has an
    interval and every day here ships: an exit 1 is a regression, not the check rule.
    Accept length is 3 every day; speedup = 10 · 3 / ms at batch size 1."""
    write_table(root, "deployments", [
        {"deployment_id": "spec", "model": "m", "method": "eagle", "num_speculative_tokens": 4},
        {"deployment_id": "base", "model": "m", "method": "none", "num_speculative_tokens": 0}])
    n = 10
    for date, ms in spec_ms_by_day.items():
        nb = 2 * n
        write_columns(root, "rounds", {
            "deployment_id": ["spec"] * n + ["base"] * nb,
            "request_id": [f"r{i}" for i in range(n)] + [f"b{i % 10}" for i in range(nb)],
            "round_idx": [0] * n + [i // 10 for i in range(nb)], "step_id": list(range(n)) + list(range(nb)),
            "num_draft_tokens": [4] * n + [0] * nb, "num_accepted_tokens": [2] * n + [0] * nb,
            "num_committed_tokens": [3] * n + [1] * nb, "stop_reason": [None] * (n + nb),
        }, partition=f"date={date}")
        write_columns(root, "steps", {
            "deployment_id": ["spec"] * n + ["base"] * nb, "step_id": list(range(n)) + list(range(nb)),
            "start_time": [at(i) for i in range(n + nb)],
            "duration_ms": [ms + o for o in OFFSETS_10] + [10.0 + o for o in OFFSETS_20],
            "batch_size": [1] * (n + nb),
        }, partition=f"date={date}")
    return root


def run(traces, dates, out, config):
    return [CliRunner().invoke(main, ["nightly", str(traces), "--date", d, "--out", str(out),
                                      "--config", str(config)]) for d in dates]


def regression_lines(result) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.lower().startswith("regression")]


def test_nightly_end_to_end_over_seven_dates(tmp_path):
    # speedups 2.0, 1.923, 2.083, 1.961, 2.041 on five noisy days (median 2.0, |deviations| 0 .077 .083
    # .039 .041, MAD .0408 = 30 / 14.7 − 2, spread 4 · 1.4826 · .0408 / 2 = 12.1 %); then 1.852
    # (30 / 16.2): −7.4 %, past the 5 % threshold and below every earlier day, but within the spread; then
    # 1.6 (30 / 18.75) against the six earlier days: median (1.961 + 2.0) / 2 = 1.980, |deviations| .020
    # .057 .103 .020 .060 .129, MAD (.057 + .060) / 2 = .0589, spread 17.6 %; −19.2 %, flagged
    ms = [15.0, 15.6, 14.4, 15.3, 14.7, 16.2, 18.75]
    dates = DATES[:7]
    traces = write_days(tmp_path / "traces", dict(zip(dates, ms)))
    config = tmp_path / "loose.toml"
    config.write_text(LOOSE)
    out = tmp_path / "out"
    results = run(traces, dates, out, config)
    assert [r.exit_code for r in results] == [0, 0, 0, 0, 0, 0, 1]
    assert [r.stderr for r in results] == [""] * 7        # every day ships: the exit 1 is the flag
    lines = [regression_lines(r) for r in results]
    assert lines[0] == ["Regressions: not checked — 0 earlier dates in the history, 3 needed (min_history_dates)"]
    assert lines[1] == ["Regressions: not checked — 1 earlier date in the history, 3 needed (min_history_dates)"]
    assert lines[2] == ["Regressions: not checked — 2 earlier dates in the history, 3 needed (min_history_dates)"]
    assert lines[5] == ["Regressions: none — no headline metric moved past both its threshold and the spread of "
                        "the window's 5 earlier dates"]
    assert lines[6] == ["Regressions: 1 flagged against the window's 6 earlier dates",
                        "regression: spec speedup 1.6 vs median 1.98 (-19.2%)"]
    docs = [json.loads((out / d / "report.json").read_text()) for d in dates]
    assert [d["regression_check"]["status"] for d in docs] == ["insufficient_history"] * 3 + ["checked"] * 4
    assert [d["regression_check"]["earlier_dates"] for d in docs] == [0, 1, 2, 3, 4, 5, 6]
    assert all(d["regressions"] == [] for d in docs[:6])
    (flag,) = docs[6]["regressions"]
    median = (30 / 15.3 + 30 / 15.0) / 2
    mad = ((30 / 15.0 - 30 / 15.6) - (30 / 15.3 - median) + (30 / 14.7 - median)) / 2
    assert mad == pytest.approx(((2.0 - 1.923077) - (1.960784 - median) + (2.040816 - median)) / 2)
    assert flag["metric"] == "speedup" and flag["value"] == pytest.approx(1.6)
    assert flag["baseline"] == pytest.approx(median)
    assert flag["spread"] == pytest.approx(4 * 1.4826 * (median - 30 / 15.6 + 30 / 14.7 - median) / 2 / median)
    assert flag["change"] == pytest.approx(1.6 / median - 1)
    assert flag["window_dates"] == dates[:6] and flag["flagged_since"] == dates[6]
    assert "Not checked — 1 earlier date in the history" in (out / dates[1] / "report.md").read_text()
    # the HTML page says the same sentences: not checked on day 2; the flag and its count on day 7
    assert ('<p class="note">Regressions: not checked — 1 earlier date in the history, 3 needed '
            '(min_history_dates).</p>') in (out / dates[1] / "report.html").read_text()
    page = (out / dates[6] / "report.html").read_text()
    assert "<li>spec speedup 1.6 vs median 1.98 (-19.2%)</li>" in page
    assert '<p class="note">Regressions: 1 flagged against the window&#x27;s 6 earlier dates.</p>' in page


def test_nightly_flags_a_lasting_drop_every_day_until_accept_since(tmp_path):
    # the five noisy days of the test above (median 2.0, MAD .0408, spread 12.1 %), then 1.6 (−20 %) for
    # four days: each is compared with the five noisy days and flagged, exit 1 every day
    ms = [15.0, 15.6, 14.4, 15.3, 14.7] + [18.75] * 4
    traces = write_days(tmp_path / "traces", dict(zip(DATES, ms)))
    config = tmp_path / "loose.toml"
    config.write_text(LOOSE)
    out = tmp_path / "out"
    results = run(traces, DATES, out, config)
    assert [r.exit_code for r in results] == [0] * 5 + [1] * 4
    assert [r.stderr for r in results] == [""] * 9        # every day ships (1.6 too): the exits 1 are the flags
    first = DATES[5]
    assert regression_lines(results[5])[1] == "regression: spec speedup 1.6 vs median 2 (-20.0%)"
    for result, earlier in zip(results[6:], (6, 7, 7)):
        assert regression_lines(result) == [
            f"Regressions: 1 flagged against the window's {earlier} earlier dates",
            f"regression: spec speedup 1.6 vs median 2 (-20.0%): still below the median of the window before "
            f"{first}, flagged since then"]
    last = json.loads((out / DATES[8] / "report.json").read_text())
    (flag,) = last["regressions"]
    assert flag["window_dates"] == DATES[:5]
    assert flag["excluded_flagged_dates"] == DATES[5:8]
    assert flag["spread"] == pytest.approx(4 * 1.4826 * (30 / 14.7 - 2) / 2)
    # the flags are replayed, not stored: running the drop's third day again says the same
    again = run(traces, [DATES[7]], out, config)[0]
    assert (again.exit_code, regression_lines(again)) == (1, regression_lines(results[7]))

    # the same five days of history, then accept_since = the drop's first day: its first three days have
    # 0, 1 and 2 earlier dates from it on (not checked, exit 0), the fourth is compared with three days
    # of 1.6: nothing moved
    accepted = tmp_path / "accepted"
    accepted.mkdir()
    shutil.copy(out / "history.parquet", accepted / "history.parquet")
    config.write_text(LOOSE + f"[nightly]\naccept_since = {first}\n")
    results = run(traces, DATES[5:], accepted, config)
    assert [r.exit_code for r in results] == [0, 0, 0, 0]
    assert [r.stderr for r in results] == [""] * 4
    assert [regression_lines(r) for r in results[:3]] == [
        [f"Regressions: not checked — {n} in the history since accept_since {first}, 3 needed "
         f"(min_history_dates)"] for n in ("0 earlier dates", "1 earlier date", "2 earlier dates")]
    assert regression_lines(results[3]) == [
        "Regressions: none — no headline metric moved past both its threshold and the spread of the window's "
        "3 earlier dates"]
    check = json.loads((accepted / DATES[8] / "report.json").read_text())["regression_check"]
    assert check["accepted_since"] == {"base": first, "spec": first}


def test_nightly_flags_a_slow_decline_against_the_reference(tmp_path):
    # speedup 2 · C[(n − 1) % 5] on days 1-7 (the reference: median 2.0, spread 12.58 % as above, the rule
    # being scale-free), then 2 % a day compound: 2 · 0.98^k · C. Day 13 (decline day 6) is 2 · 0.98^6 · 0.95
    # = 1.683, −15.8 %: exit 1, the first exit 1 of the thirteen runs. The window never flags it.
    dates = [f"2026-11-{d}" for d in range(16, 29)]
    levels = [1.0] * 7 + [0.98 ** k for k in range(1, 7)]
    ms = [15.0 / (C[i % 5] * level) for i, level in enumerate(levels)]      # speedup = 30 / ms
    traces = write_days(tmp_path / "traces", dict(zip(dates, ms)))
    config = tmp_path / "loose.toml"
    config.write_text(LOOSE)
    out = tmp_path / "out"
    results = run(traces, dates, out, config)
    assert [r.exit_code for r in results] == [0] * 12 + [1]
    assert [r.stderr for r in results] == [""] * 13       # every day ships: the exit 1 is the flag
    assert regression_lines(results[12]) == [
        "Regressions: 1 flagged against the reference",
        "regression: spec speedup 1.683: 15.8% below the reference (median of 2026-11-16..2026-11-22: 2)"]
    assert regression_lines(results[11]) == [
        "Regressions: none — no headline metric moved past both its threshold and the spread of the window's "
        "7 earlier dates, nor of its reference"]
    doc = json.loads((out / dates[12] / "report.json").read_text())
    (flag,) = doc["regressions"]
    assert (flag["rule"], flag["reference_dates"], flag["flagged_since"]) == ("reference", dates[:7], dates[12])
    assert flag["change"] == pytest.approx(0.98 ** 6 * 0.95 - 1)
    speedup = doc["regression_check"]["references"]["spec"]["metrics"]["speedup"]
    assert speedup == {"values": 7, "median": pytest.approx(2.0), "spread": pytest.approx(REF_SPEEDUP),
                       "limit": pytest.approx(REF_SPEEDUP)}
    assert "- spec speedup 1.683: 15.8% below the reference" in (out / dates[12] / "report.md").read_text()
    assert ("<li>spec speedup 1.683: 15.8% below the reference (median of 2026-11-16..2026-11-22: 2)</li>"
            in (out / dates[12] / "report.html").read_text())
