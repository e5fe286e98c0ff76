"""specan nightly: dated runs, history upserts, regression flags, and the self-contained HTML page."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from analyzer.analysis import history
from analyzer.analysis.config import Regression
from analyzer.cli import main
from analyzer.nightly import run_nightly
from tracebuilder import at, write_columns, write_table

ROOT = Path(__file__).resolve().parents[1]
DATES = ["2026-11-25", "2026-11-26", "2026-11-27", "2026-11-28"]
LOOSE = "[gates.latency]\nttft_p99_ms = 1e9\ntpot_p95_ms = 1e9\nmax_stall_p99_ms = 1e9\n"


def write_days(root: Path, accepted_by_day: dict[str, int]) -> Path:
    """Per day: 10 eagle rounds (γ = 4, K accepted each, 15 ms steps) and 10 baseline rounds (10 ms).

    mean accept length = 1 + K; speedup = 10 · (K + 1) / 15 at batch size 1.
    """
    write_table(root, "deployments", [
        {"deployment_id": "spec", "model": "m", "method": "eagle", "num_speculative_tokens": 4},
        {"deployment_id": "base", "model": "m", "method": "none", "num_speculative_tokens": 0}])
    for date, k in accepted_by_day.items():
        n = 10
        write_columns(root, "rounds", {
            "deployment_id": ["spec"] * n + ["base"] * n, "request_id": ["r"] * n + ["b"] * n,
            "round_idx": list(range(n)) * 2, "step_id": list(range(n)) + list(range(n)),
            "num_draft_tokens": [4] * n + [0] * n, "num_accepted_tokens": [k] * n + [0] * n,
            "num_committed_tokens": [k + 1] * n + [1] * n, "stop_reason": [None] * 2 * n,
        }, partition=f"date={date}")
        write_columns(root, "steps", {
            "deployment_id": ["spec"] * n + ["base"] * n, "step_id": list(range(n)) * 2,
            "start_time": [at(i) for i in range(2 * n)], "duration_ms": [15.0] * n + [10.0] * n,
            "batch_size": [1] * 2 * n,
        }, partition=f"date={date}")
    return root


@pytest.fixture
def loose(tmp_path):
    path = tmp_path / "loose.toml"
    path.write_text(LOOSE)
    return path


def nightly(traces, date, out, config):
    return CliRunner().invoke(main, ["nightly", str(traces), "--date", date, "--out", str(out),
                                     "--config", str(config)])


def test_only_the_day_with_the_acceptance_drop_is_flagged(tmp_path, loose):
    traces = write_days(tmp_path / "traces", {DATES[0]: 2, DATES[1]: 2, DATES[2]: 2, DATES[3]: 1})
    out = tmp_path / "out"
    codes = [nightly(traces, d, out, loose).exit_code for d in DATES]
    assert codes == [0, 0, 0, 1]
    for date in DATES[:3]:
        assert json.loads((out / date / "report.json").read_text())["regressions"] == []
    last = json.loads((out / DATES[3] / "report.json").read_text())
    # accept length 2.0 vs median 3.0 (-1/3); speedup 10·2/15 vs 10·3/15 (-1/3)
    assert [(r["deployment_id"], r["metric"]) for r in last["regressions"]] == [
        ("spec", "mean_accept_length"), ("spec", "speedup")]
    assert last["regressions"][0]["value"] == pytest.approx(2.0)
    assert last["regressions"][0]["baseline"] == pytest.approx(3.0)
    assert last["regressions"][0]["change"] == pytest.approx(-1 / 3)
    assert last["date"] == DATES[3]
    assert {p.name for p in (out / DATES[3]).iterdir()} == {"report.md", "report.json", "report.html"}
    assert "## Regressions" in (out / DATES[3] / "report.md").read_text()
    # the fourth date is the first with min_history_dates (3) earlier dates; the others say so
    assert last["regression_check"] == {"status": "checked", "earlier_dates": 3, "needed": 3, "window_days": 7,
                                        "not_checked": []}
    third = json.loads((out / DATES[2] / "report.json").read_text())
    assert third["regression_check"]["status"] == "insufficient_history"
    assert third["regression_check"]["earlier_dates"] == 2


def test_a_day_reads_only_its_own_partitions(tmp_path, loose):
    traces = write_days(tmp_path / "traces", {DATES[0]: 3, DATES[1]: 1})
    run_nightly(traces, DATES[0], tmp_path / "out")
    doc = json.loads((tmp_path / "out" / DATES[0] / "report.json").read_text())
    spec = next(d for d in doc["deployments"] if d["deployment_id"] == "spec")
    assert spec["num_rounds"] == 10 and spec["mean_accept_length"] == 4.0


def test_rerunning_a_date_keeps_one_row_per_date_and_deployment(tmp_path, loose):
    traces = write_days(tmp_path / "traces", {DATES[0]: 2, DATES[1]: 2})
    out = tmp_path / "out"
    for date in (DATES[0], DATES[1], DATES[1], DATES[0]):
        nightly(traces, date, out, loose)
    rows = pl.read_parquet(out / "history.parquet")
    counts = rows.group_by(["date", "deployment_id"]).len()
    assert counts.height == 4 and counts.get_column("len").to_list() == [1, 1, 1, 1]


def test_a_crash_before_the_rename_leaves_the_old_history(tmp_path, loose, monkeypatch):
    traces = write_days(tmp_path / "traces", {DATES[0]: 2, DATES[1]: 2})
    out = tmp_path / "out"
    nightly(traces, DATES[0], out, loose)
    before = (out / "history.parquet").read_bytes()

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(history.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        run_nightly(traces, DATES[1], out)
    assert (out / "history.parquet").read_bytes() == before
    assert [p.name for p in out.iterdir() if p.name.startswith(".history-")] == []


def test_no_earlier_date_means_nothing_is_checked():
    import datetime as dt

    day = dt.date(2026, 11, 28)
    frame = pl.DataFrame([{"date": day, "deployment_id": "spec", "mean_accept_length": 1.0, "speedup": 0.1,
                           "tpot_p99": 99.0}])
    check, flagged = history.check_regressions(frame, day, Regression())
    assert flagged == []
    assert check == {"status": "insufficient_history", "earlier_dates": 0, "needed": 3, "window_days": 7,
                     "not_checked": []}


def test_window_takes_the_latest_dates_and_skips_nulls_and_zero_baselines():
    import datetime as dt

    days = [dt.date(2026, 11, d) for d in range(20, 29)]
    # speedup 1.0 on the 20th-24th, 2.0 on the 25th-27th: with window_days = 3 the median is 2.0
    rows = [{"date": d, "deployment_id": "spec", "mean_accept_length": 0.0 if d.day < 28 else 1.0,
             "speedup": (1.0 if d.day < 25 else 2.0) if d.day < 28 else 1.8, "tpot_p99": None} for d in days]
    frame = pl.DataFrame(rows)
    check, flagged = history.check_regressions(frame, days[-1], Regression(window_days=3))
    # speedup 1.8 vs median 2.0: -10%, past the 5% threshold and the window's spread (0: three equal days);
    # accept length's baseline is 0 and tpot is null: skipped
    assert flagged == [{"deployment_id": "spec", "metric": "speedup", "value": 1.8, "baseline": 2.0,
                        "change": pytest.approx(-0.1), "spread": 0.0, "limit": 0.05}]
    assert check["status"] == "checked" and check["earlier_dates"] == 3
    # with a 9-day window the median of 1,1,1,1,1,2,2,2 is 1.0: a rise, not flagged
    assert history.check_regressions(frame, days[-1], Regression(window_days=9))[1] == []


def test_bad_date_is_a_usage_error(tmp_path, loose):
    traces = write_days(tmp_path / "traces", {DATES[0]: 2})
    result = nightly(traces, "28/11/2026", tmp_path / "out", loose)
    assert result.exit_code == 2 and "expected YYYY-MM-DD" in result.stderr
    result = nightly(traces, "2026-01-01", tmp_path / "out", loose)
    assert result.exit_code == 2 and "no partition date=2026-01-01" in result.stderr


NETWORK = re.compile(r"""(?:src|href)\s*=\s*["']\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|@import""", re.I)


@pytest.fixture
def sample_html(tmp_path, sample_report):
    out = tmp_path / "report.html"
    out.write_text(sample_report["html"], encoding="utf-8")
    return out


def test_html_has_no_network_references(sample_html):
    text = sample_html.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert not NETWORK.findall(text)
    assert "<script" not in text
    assert text.count("<svg") == 3  # survival, load curve, latency


SIZES_PROBE = """<script>
window.addEventListener('load', () => {
  const sizes = [...document.querySelectorAll('svg')].map(s => {
    const r = s.getBoundingClientRect(); return [Math.round(r.width), Math.round(r.height)]; });
  const pre = document.createElement('pre'); pre.id = 'svg-sizes'; pre.textContent = JSON.stringify(sizes);
  document.body.appendChild(pre);
});
</script></body>"""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it); the browser render test needs it")
    return found


def headless(browser: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,2400"]
    return subprocess.run([browser, *flags, *args], capture_output=True, text=True, timeout=120)


def test_browser_renders_the_charts(sample_html, tmp_path):
    browser = chromium()
    shot = tmp_path / "report.png"
    headless(browser, tmp_path, f"--screenshot={shot}", sample_html.as_uri())
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)
    assert pixels.shape[0] > 1000 and pixels.std() > 0.05  # not a blank page
    probe = tmp_path / "probe.html"
    probe.write_text(sample_html.read_text().replace("</body>", SIZES_PROBE))
    dom = headless(browser, tmp_path, "--dump-dom", probe.as_uri()).stdout
    sizes = json.loads(re.search(r'<pre id="svg-sizes">(.*?)</pre>', dom).group(1))
    assert len(sizes) == 3
    assert all(width > 200 and height > 100 for width, height in sizes)
