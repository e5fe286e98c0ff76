"""The nightly regression rule (issue 16): enough history, past the threshold and past the window's spread.

The rule (analyzer/analysis/history.py, docs/commands.md "Regressions"): with at
least min_history_dates earlier dates, a metric is flagged when its change
against the window's median is past max(threshold, spread), where spread =
(max − min) / median of the window. Every expected number below is worked out
by hand in the comments.
"""

from __future__ import annotations

import datetime as dt
import json

import polars as pl
import pytest
from click.testing import CliRunner

from analyzer.analysis import history
from analyzer.analysis.config import ConfigError, Regression, load_config
from analyzer.cli import main
from analyzer.render import markdown
from analyzer.render.regressions import status_lines
from tracebuilder import at, write_columns, write_table

TODAY = dt.date(2026, 11, 28)
# Five earlier days of an unchanged deployment whose numbers move by noise:
#   speedup            1.00 1.06 0.95 1.03 0.98  median 1.00  spread (1.06 − 0.95) / 1.00 = 0.11
#   mean_accept_length 3.00 3.10 2.90 3.05 2.95  median 3.00  spread (3.10 − 2.90) / 3.00 = 0.0667
#   tpot_p99           40   44   38   50   42    median 42    spread (50 − 38) / 42       = 0.2857
NOISY = [(1.00, 3.00, 40.0), (1.06, 3.10, 44.0), (0.95, 2.90, 38.0), (1.03, 3.05, 50.0), (0.98, 2.95, 42.0)]


def frame(earlier: list[tuple], today: tuple, deployment: str = "spec") -> pl.DataFrame:
    """``earlier`` on the days before TODAY (the last one on the day before), then ``today``."""
    days = [TODAY - dt.timedelta(days=len(earlier) - i) for i in range(len(earlier))] + [TODAY]
    return pl.DataFrame(
        [{"date": day, "deployment_id": deployment, "speedup": s, "mean_accept_length": a, "tpot_p99": t}
         for day, (s, a, t) in zip(days, [*earlier, today])],
        schema={"date": pl.Date, "deployment_id": pl.Utf8, "speedup": pl.Float64,
                "mean_accept_length": pl.Float64, "tpot_p99": pl.Float64})


def check(data: pl.DataFrame, **rule) -> tuple[dict, list[dict]]:
    return history.check_regressions(data, TODAY, Regression(**rule))


# ---------------------------------------------------------------- too little history


@pytest.mark.parametrize("earlier, sentence", [
    (1, "Regressions: not checked — 1 earlier date in the history, 3 needed (min_history_dates)"),
    (2, "Regressions: not checked — 2 earlier dates in the history, 3 needed (min_history_dates)"),
])
def test_one_or_two_earlier_dates_are_not_checked_even_for_a_halving(earlier, sentence):
    c, flagged = check(frame(NOISY[:earlier], (0.5, 1.5, 84.0)))
    assert flagged == []
    assert c == {"status": "insufficient_history", "earlier_dates": earlier, "needed": 3, "window_days": 7,
                 "not_checked": []}
    assert status_lines(c, flagged) == [sentence]


def test_exactly_min_history_dates_is_checked():
    # 1.00 1.06 0.95: median 1.00, spread 0.11; 0.80 is −20 %, past max(0.05, 0.11)
    c, flagged = check(frame(NOISY[:3], (0.80, 3.0, 40.0)))
    assert c["status"] == "checked" and c["earlier_dates"] == 3
    assert [(r["metric"], r["value"], r["baseline"]) for r in flagged] == [("speedup", 0.80, 1.00)]
    assert flagged[0]["change"] == pytest.approx(-0.20)
    assert flagged[0]["spread"] == pytest.approx(0.11)
    assert flagged[0]["limit"] == pytest.approx(0.11)
    # one more needed: the same history is no longer enough
    c, flagged = check(frame(NOISY[:3], (0.80, 3.0, 40.0)), min_history_dates=4)
    assert (c["status"], c["earlier_dates"], c["needed"], flagged) == ("insufficient_history", 3, 4, [])


# ---------------------------------------------------------------- five earlier dates


def test_noisy_but_unchanged_is_not_flagged():
    # speedup 0.92: −8 %, past the 5 % threshold and below every earlier day, but within the spread (11 %);
    # accept length 2.86: −4.7 %, within both; tpot_p99 52: +23.8 %, past 10 % and above every earlier day,
    # but within the spread (28.6 %)
    c, flagged = check(frame(NOISY, (0.92, 2.86, 52.0)))
    assert c == {"status": "checked", "earlier_dates": 5, "needed": 3, "window_days": 7, "not_checked": []}
    assert flagged == []
    assert status_lines(c, flagged) == [
        "Regressions: none — no headline metric moved past both its threshold and the spread of the window's "
        "5 earlier dates"]


def test_a_real_drop_is_flagged():
    # speedup 0.80 vs 1.00: −20 % past 11 %; accept length 2.40 vs 3.00: −20 % past 6.67 %;
    # tpot_p99 56 vs 42: +33.3 % past 28.6 %
    c, flagged = check(frame(NOISY, (0.80, 2.40, 56.0)))
    assert [r["metric"] for r in flagged] == ["mean_accept_length", "speedup", "tpot_p99"]
    accept, speedup, tpot = flagged
    assert accept == {"deployment_id": "spec", "metric": "mean_accept_length", "value": 2.40, "baseline": 3.00,
                      "change": pytest.approx(-0.2), "spread": pytest.approx(0.2 / 3),
                      "limit": pytest.approx(0.2 / 3)}
    assert (speedup["baseline"], speedup["change"], speedup["limit"]) == (1.00, pytest.approx(-0.2),
                                                                          pytest.approx(0.11))
    assert (tpot["baseline"], tpot["change"], tpot["limit"]) == (42.0, pytest.approx(14 / 42),
                                                                 pytest.approx(12 / 42))
    assert status_lines(c, flagged) == ["Regressions: 3 flagged against the window's 5 earlier dates"]


def test_a_quiet_window_leaves_the_threshold_as_the_limit():
    steady = [(1.0, 3.0, 40.0)] * 5          # spread 0: the limit is the threshold itself
    assert check(frame(steady, (0.96, 3.0, 40.0)))[1] == []          # −4 %, within 5 %
    flagged = check(frame(steady, (0.94, 3.0, 40.0)))[1]             # −6 %, past 5 %
    assert [(r["metric"], r["spread"], r["limit"]) for r in flagged] == [("speedup", 0.0, 0.05)]
    assert flagged[0]["change"] == pytest.approx(-0.06)


def test_the_window_is_the_latest_window_days_dates():
    # seven quiet days at 1.0, two older ones at 2.0: window_days = 7 leaves the old ones out
    earlier = [(2.0, 3.0, 40.0)] * 2 + [(1.0, 3.0, 40.0)] * 7
    c, flagged = check(frame(earlier, (0.9, 3.0, 40.0)))
    assert c["earlier_dates"] == 7                     # nine in the history, seven in the window
    assert [(r["metric"], r["baseline"], r["limit"]) for r in flagged] == [("speedup", 1.0, 0.05)]
    # a 9-date window takes them in: median 1.0, spread (2 − 1) / 1 = 1.0, so −10 % is noise
    assert check(frame(earlier, (0.9, 3.0, 40.0)), window_days=9)[1] == []


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


def test_a_metric_with_too_few_values_in_the_window_is_skipped():
    # tpot_p99 only on the last two earlier days: two values are not enough for a median and a spread
    earlier = [(s, a, t if i >= 3 else None) for i, (s, a, t) in enumerate(NOISY)]
    assert check(frame(earlier, (1.0, 3.0, 400.0)))[1] == []
    # a baseline deployment has no accept length or speedup at all: nothing to flag, nothing fails
    base = [(None, None, t) for _, _, t in NOISY]
    assert check(frame(base, (None, None, 42.0), "base"))[1] == []


# ---------------------------------------------------------------- config


def test_min_history_dates_is_configurable(tmp_path):
    path = tmp_path / "gates.toml"
    path.write_text("[regression]\nmin_history_dates = 5\nwindow_days = 5\n")
    rule = load_config(path).regression
    assert (rule.min_history_dates, rule.window_days) == (5, 5)
    assert history.check_regressions(frame(NOISY[:4], (0.5, 1.0, 90.0)), TODAY, rule)[0]["status"] == \
        "insufficient_history"
    assert history.check_regressions(frame(NOISY, (0.5, 1.0, 90.0)), TODAY, rule)[0]["status"] == "checked"


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


def doc_with(c: dict, flagged: list[dict]) -> dict:
    return {"date": "2026-11-28", "regression_check": c, "regressions": flagged}


def test_markdown_says_not_checked_and_never_none_without_history():
    c, flagged = check(frame(NOISY[:1], (0.5, 1.5, 84.0)))
    assert markdown._regressions(doc_with(c, flagged)) == (
        "## Regressions\n\nNot checked — 1 earlier date in the history, 3 needed (min_history_dates).\n")


def test_markdown_table_shows_the_limit():
    c, flagged = check(frame(NOISY, (0.80, 3.0, 40.0)))
    text = markdown._regressions(doc_with(c, flagged))
    assert text.startswith("## Regressions\n\n1 flagged against the window's 5 earlier dates.\n\n")
    assert "| spec | speedup | 0.800 | 1.000 | -20.0% | 11.0% |" in text


# ---------------------------------------------------------------- end to end

DATES = [f"2026-11-{d}" for d in range(20, 27)]
LOOSE = "[gates.latency]\nttft_p99_ms = 1e9\ntpot_p95_ms = 1e9\nmax_stall_p99_ms = 1e9\n"


def write_days(root, spec_ms_by_day: dict[str, float]):
    """Per day: 10 eagle rounds (γ = 4, 2 accepted each) with steps of the day's ms, and 20 baseline
    rounds of 10 ms of 10 requests (enough for a usable t0: the [evidence] floors). Accept length
    is 3 every day; speedup = 10 · 3 / ms at batch size 1."""
    write_table(root, "deployments", [
        {"deployment_id": "spec", "model": "m", "method": "eagle", "num_speculative_tokens": 4},
        {"deployment_id": "base", "model": "m", "method": "none", "num_speculative_tokens": 0}])
    n = 10
    for date, ms in spec_ms_by_day.items():
        nb = 2 * n
        write_columns(root, "rounds", {
            "deployment_id": ["spec"] * n + ["base"] * nb,
            "request_id": ["r"] * n + [f"b{i % 10}" for i in range(nb)],
            "round_idx": list(range(n)) + [i // 10 for i in range(nb)], "step_id": list(range(n)) + list(range(nb)),
            "num_draft_tokens": [4] * n + [0] * nb, "num_accepted_tokens": [2] * n + [0] * nb,
            "num_committed_tokens": [3] * n + [1] * nb, "stop_reason": [None] * (n + nb),
        }, partition=f"date={date}")
        write_columns(root, "steps", {
            "deployment_id": ["spec"] * n + ["base"] * nb, "step_id": list(range(n)) + list(range(nb)),
            "start_time": [at(i) for i in range(n + nb)], "duration_ms": [ms] * n + [10.0] * nb,
            "batch_size": [1] * (n + nb),
        }, partition=f"date={date}")
    return root


def test_nightly_end_to_end_over_seven_dates(tmp_path):
    # speedups 2.0, 1.923, 2.083, 1.961, 2.041 on five noisy days; then 1.852 (30 / 16.2): −7.4 % against
    # the median 2.0, past the 5 % threshold and below every earlier day, but within the spread
    # (2.083 − 1.923) / 2.0 = 8.0 %; then 1.6 (30 / 18.75): against the six earlier days (median
    # (1.961 + 2.0) / 2 = 1.980, spread (2.083 − 1.852) / 1.980 = 11.7 %) −19.2 %, flagged
    ms = [15.0, 15.6, 14.4, 15.3, 14.7, 16.2, 18.75]
    traces = write_days(tmp_path / "traces", dict(zip(DATES, ms)))
    config = tmp_path / "loose.toml"
    config.write_text(LOOSE)
    out = tmp_path / "out"
    results = [CliRunner().invoke(main, ["nightly", str(traces), "--date", d, "--out", str(out),
                                         "--config", str(config)]) for d in DATES]
    assert [r.exit_code for r in results] == [0, 0, 0, 0, 0, 0, 1]
    lines = [[line for line in r.stdout.splitlines() if line.lower().startswith("regression")] for r in results]
    assert lines[0] == ["Regressions: not checked — 0 earlier dates in the history, 3 needed (min_history_dates)"]
    assert lines[1] == ["Regressions: not checked — 1 earlier date in the history, 3 needed (min_history_dates)"]
    assert lines[2] == ["Regressions: not checked — 2 earlier dates in the history, 3 needed (min_history_dates)"]
    assert lines[5] == ["Regressions: none — no headline metric moved past both its threshold and the spread of "
                        "the window's 5 earlier dates"]
    assert lines[6] == ["Regressions: 1 flagged against the window's 6 earlier dates",
                        "regression: spec speedup 1.6 vs median 1.98 (-19.2%)"]
    docs = [json.loads((out / d / "report.json").read_text()) for d in DATES]
    assert [d["regression_check"]["status"] for d in docs] == ["insufficient_history"] * 3 + ["checked"] * 4
    assert [d["regression_check"]["earlier_dates"] for d in docs] == [0, 1, 2, 3, 4, 5, 6]
    assert all(d["regressions"] == [] for d in docs[:6])
    (flag,) = docs[6]["regressions"]
    speedups = [30 / m for m in ms[:6]]
    median = (30 / 15.3 + 30 / 15.0) / 2
    assert flag["metric"] == "speedup" and flag["value"] == pytest.approx(1.6)
    assert flag["baseline"] == pytest.approx(median)
    assert flag["spread"] == pytest.approx((max(speedups) - min(speedups)) / median)
    assert flag["change"] == pytest.approx(1.6 / median - 1)
    assert "Not checked — 1 earlier date in the history" in (out / DATES[1] / "report.md").read_text()
    # the HTML page says the same sentences: not checked on day 2; the flag and its count on day 7
    assert ('<p class="note">Regressions: not checked — 1 earlier date in the history, 3 needed '
            '(min_history_dates).</p>') in (out / DATES[1] / "report.html").read_text()
    page = (out / DATES[6] / "report.html").read_text()
    assert "<li>spec: speedup 1.600 vs median 1.980 (-19.2%)</li>" in page
    assert '<p class="note">Regressions: 1 flagged against the window&#x27;s 6 earlier dates.</p>' in page
