"""specan nightly: dated runs, history upserts, regression flags, and the self-contained HTML page."""

import html
import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from analyzer import outputs
from analyzer.decide import regression
from analyzer.analysis.config import Regression
from analyzer.cli import main
from analyzer.errors import EnvironmentProblem
from analyzer.nightly import run_nightly
from tracebuilder import OFFSETS_10, OFFSETS_20, at, write_columns, write_table

ROOT = Path(__file__).resolve().parents[1]
DATES = ["2026-11-25", "2026-11-26", "2026-11-27", "2026-11-28"]
LOOSE = "[gates.latency]\nttft_p99_ms = 1e9\ntpot_p95_ms = 1e9\nmax_stall_p99_ms = 1e9\n"


def write_days(root: Path, accepted_by_day: dict[str, int]) -> Path:
    """Per day: 10 eagle requests of one round each (γ = 4, K accepted each, steps of 15 ms
    on average) and 20 baseline rounds of 10 requests (10 ms on average): enough for a usable
    t0 (20 steps and 10 requests: the [evidence] floors) and for a verdict (10 requests:
    min_requests). The durations vary around their means (OFFSETS_10, OFFSETS_20, adding up
    to 0), so the speedup has an interval and every day ships unless K drops below 1: exit 1
    then means a regression, not the check rule.

    mean accept length = 1 + K; speedup = 10 · (K + 1) / 15 at batch size 1.
    """
    write_table(root, "deployments", [
        {"deployment_id": "spec", "model": "m", "method": "eagle", "num_speculative_tokens": 4},
        {"deployment_id": "base", "model": "m", "method": "none", "num_speculative_tokens": 0}])
    for date, k in accepted_by_day.items():
        n = 10
        nb = 2 * n
        write_columns(root, "rounds", {
            "deployment_id": ["spec"] * n + ["base"] * nb,
            "request_id": [f"r{i}" for i in range(n)] + [f"b{i % 10}" for i in range(nb)],
            "round_idx": [0] * n + [i // 10 for i in range(nb)], "step_id": list(range(n)) + list(range(nb)),
            "num_draft_tokens": [4] * n + [0] * nb, "num_accepted_tokens": [k] * n + [0] * nb,
            "num_committed_tokens": [k + 1] * n + [1] * nb, "stop_reason": [None] * (n + nb),
        }, partition=f"date={date}")
        write_columns(root, "steps", {
            "deployment_id": ["spec"] * n + ["base"] * nb, "step_id": list(range(n)) + list(range(nb)),
            "start_time": [at(i) for i in range(n + nb)],
            "duration_ms": [15.0 + o for o in OFFSETS_10] + [10.0 + o for o in OFFSETS_20],
            "batch_size": [1] * (n + nb),
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


def test_history_gets_the_mode_of_the_reports_and_nothing_is_left_aside(tmp_path, loose):
    traces = write_days(tmp_path / "traces", {DATES[0]: 2})
    out = tmp_path / "out"
    previous = os.umask(0o027)
    try:
        assert nightly(traces, DATES[0], out, loose).exit_code == 0
        assert nightly(traces, DATES[0], out, loose).exit_code == 0     # replaced, not added to
    finally:
        os.umask(previous)
    written = [out / DATES[0] / f"report.{fmt}" for fmt in ("md", "json", "html")] + [out / "history.parquet"]
    # 0666 less the umask, as a file the shell creates: history.parquet was once 0600
    assert [stat.S_IMODE(p.stat().st_mode) for p in written] == [0o640] * 4
    assert sorted(p.name for p in out.iterdir()) == [DATES[0], "history.parquet", "history.parquet.lock"]
    assert sorted(p.name for p in (out / DATES[0]).iterdir()) == ["report.html", "report.json", "report.md"]


def test_only_the_day_with_the_acceptance_drop_is_flagged(tmp_path, loose):
    traces = write_days(tmp_path / "traces", {DATES[0]: 2, DATES[1]: 2, DATES[2]: 2, DATES[3]: 1})
    out = tmp_path / "out"
    results = [nightly(traces, d, out, loose) for d in DATES]
    assert [r.exit_code for r in results] == [0, 0, 0, 1]
    # every day ships (the fourth at 10 · 2 / 15 = 1.33): nothing on stderr, the exit 1 is the flag
    assert [r.stderr for r in results] == [""] * 4
    assert [json.loads((out / d / "report.json").read_text())["verdict"][1]["action"] for d in DATES] == ["ship"] * 4
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
    # and the reference is still forming: four dates of the seven it is made of (window_days)
    forming = {"status": "forming", "dates": DATES}
    assert last["regression_check"] == {"status": "checked", "earlier_dates": 3, "needed": 3, "window_days": 7,
                                        "not_checked": [], "accepted_since": {},
                                        "references": {"base": forming, "spec": forming}}
    assert [r["window_dates"] for r in last["regressions"]] == [DATES[:3]] * 2
    third = json.loads((out / DATES[2] / "report.json").read_text())
    assert third["regression_check"]["status"] == "insufficient_history"
    assert third["regression_check"]["earlier_dates"] == 2


def test_a_backfilled_date_is_compared_with_the_dates_before_it(tmp_path, loose):
    # accept length 3 on the 25th-27th, then 2 (K = 1) from the 28th to the 30th; the 28th runs last, as a
    # backfill. Each drop day is compared with the three days of 3 (median 3, MAD 0, limit 5 %): −1/3
    dates = DATES + ["2026-11-29", "2026-11-30"]
    traces = write_days(tmp_path / "traces", dict(zip(dates, [2, 2, 2, 1, 1, 1])))
    out = tmp_path / "out"
    first = [nightly(traces, d, out, loose) for d in dates[:3] + dates[4:]]
    assert [r.exit_code for r in first] == [0, 0, 0, 1, 1]
    assert [r.stderr for r in first] == [""] * 5        # every day ships: the exits 1 are the flags
    # without the 28th, the 29th starts the flag and the 30th continues it
    assert "flagged since then" not in first[3].stdout
    assert f"window before {dates[4]}, flagged since then" in first[4].stdout
    backfill = nightly(traces, dates[3], out, loose)
    assert (backfill.exit_code, backfill.stderr) == (1, "")
    doc = json.loads((out / dates[3] / "report.json").read_text())
    # later dates in the history (the 29th and 30th) are not in its window, and not counted
    assert doc["regression_check"]["earlier_dates"] == 3
    assert [(r["metric"], r["baseline"], r["window_dates"], r["flagged_since"]) for r in doc["regressions"]] == [
        ("mean_accept_length", 3.0, dates[:3], dates[3]), ("speedup", 2.0, dates[:3], dates[3])]
    # the flags are replayed from the history, so the 30th run again now says the flag began on the 28th
    again = nightly(traces, dates[5], out, loose)
    assert f"window before {dates[3]}, flagged since then" in again.stdout
    last = json.loads((out / dates[5] / "report.json").read_text())
    assert [r["excluded_flagged_dates"] for r in last["regressions"]] == [dates[3:5]] * 2


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

    replace = os.replace

    def crash(src, dst):
        if Path(dst).name == "history.parquet":
            raise OSError(28, "No space left on device")
        replace(src, dst)

    monkeypatch.setattr(outputs.os, "replace", crash)
    with pytest.raises(EnvironmentProblem, match=f"cannot write {out / 'history.parquet'}: No space left on device"):
        run_nightly(traces, DATES[1], out)
    assert (out / "history.parquet").read_bytes() == before
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


def test_no_earlier_date_means_nothing_is_checked():
    import datetime as dt

    day = dt.date(2026, 11, 28)
    frame = pl.DataFrame([{"date": day, "deployment_id": "spec", "mean_accept_length": 1.0, "speedup": 0.1,
                           "tpot_p99": 99.0}])
    check, flagged = regression.check_regressions(frame, day, Regression())
    assert flagged == []
    assert check == {"status": "insufficient_history", "earlier_dates": 0, "needed": 3, "window_days": 7,
                     "not_checked": [], "accepted_since": {},
                     "references": {"spec": {"status": "forming", "dates": ["2026-11-28"]}}}


def test_window_takes_the_latest_dates_and_skips_nulls_and_zero_baselines():
    import datetime as dt

    days = [dt.date(2026, 11, d) for d in range(20, 29)]
    # speedup 1.0 on the 20th-24th, 2.0 on the 25th-27th: with window_days = 3 the median is 2.0
    rows = [{"date": d, "deployment_id": "spec", "mean_accept_length": 0.0 if d.day < 28 else 1.0,
             "speedup": (1.0 if d.day < 25 else 2.0) if d.day < 28 else 1.8, "tpot_p99": None} for d in days]
    frame = pl.DataFrame(rows)
    check, flagged = regression.check_regressions(frame, days[-1], Regression(window_days=3))
    # speedup 1.8 vs median 2.0: -10%, past the 5% threshold and the window's spread (0: three equal days,
    # MAD 0); accept length's baseline is 0 and tpot is null: skipped
    assert flagged == [{"deployment_id": "spec", "metric": "speedup", "rule": "window", "value": 1.8, "baseline": 2.0,
                        "change": pytest.approx(-0.1), "spread": 0.0, "limit": 0.05,
                        "window_dates": ["2026-11-25", "2026-11-26", "2026-11-27"], "excluded_flagged_dates": [],
                        "flagged_since": "2026-11-28"}]
    assert check["status"] == "checked" and check["earlier_dates"] == 3
    # the reference is the first three dates (window_days = 3): speedup 1.0 1.0 1.0, median 1.0, no
    # day-to-day difference, so the limit is the 5 % threshold and 1.8 (a rise) is not flagged; accept
    # length's median is 0 (no limit); tpot_p99 has no reference (the reference rule judges the accept
    # length and the speedup only: a latency is judged by the window)
    assert check["references"] == {"spec": {"status": "set", "dates": ["2026-11-20", "2026-11-21", "2026-11-22"],
                                            "metrics": {
        "mean_accept_length": {"values": 3, "median": 0.0, "spread": None, "limit": None},
        "speedup": {"values": 3, "median": 1.0, "spread": 0.0, "limit": 0.05}}}}
    # with a 9-day window the median of 1,1,1,1,1,2,2,2 is 1.0: a rise, not flagged
    assert regression.check_regressions(frame, days[-1], Regression(window_days=9))[1] == []


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


PROBE = """<script>
window.addEventListener('load', () => {
  const box = e => { const r = e.getBoundingClientRect();
    return [Math.round(r.left + scrollX), Math.round(r.top + scrollY), Math.round(r.width), Math.round(r.height)]; };
  const found = {
    height: document.documentElement.scrollHeight,
    h2: [...document.querySelectorAll('h2')].map(h => h.textContent),
    svgs: [...document.querySelectorAll('svg')].map(s => ({
      box: box(s), axes: [...s.querySelectorAll('g[id^="axes_"]')].map(box) })),
    emptyTables: [...document.querySelectorAll('table')].filter(t => !t.querySelector('tbody tr')).length,
  };
  const pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(found);
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


def probe(browser: str, tmp_path: Path, page: Path) -> dict:
    """What the browser laid out: the h2 texts, every chart's box and its axes' boxes (page
    pixels), the page height and the tables without a row."""
    probed = tmp_path / f"probe-{page.name}"
    probed.write_text(page.read_text().replace("</body>", PROBE))
    dom = headless(browser, tmp_path, "--dump-dom", probed.as_uri()).stdout
    return json.loads(html.unescape(re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S).group(1)))


def coloured_pixels(browser: str, tmp_path: Path, page: Path, found: dict) -> list[list[int]]:
    """Per chart, per axes: how many pixels are clearly coloured. The plotted data (lines,
    markers, bars) is drawn in colour, the axes, ticks and text in black and grey, so
    an axes without data has none."""
    import matplotlib.image as mpimg

    shot = tmp_path / f"{page.stem}.png"
    headless(browser, tmp_path, f"--screenshot={shot}", f"--window-size=1280,{found['height'] + 40}", page.as_uri())
    pixels = mpimg.imread(shot)[:, :, :3]
    saturation = pixels.max(axis=2) - pixels.min(axis=2)
    return [[int((saturation[y:y + h, x:x + w] > 0.3).sum()) for x, y, w, h in svg["axes"]]
            for svg in found["svgs"]]


def markdown_headings(text: str) -> list[str]:
    return [line[3:] for line in text.splitlines() if line.startswith("## ")]


def test_browser_renders_the_charts(sample_html, sample_report, tmp_path):
    browser = chromium()
    shot = tmp_path / "report.png"
    headless(browser, tmp_path, f"--screenshot={shot}", sample_html.as_uri())
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)
    assert pixels.shape[0] > 1000 and pixels.std() > 0.05  # not a blank page
    found = probe(browser, tmp_path, sample_html)
    # every section of the Markdown has its heading on the page
    assert [h for h in markdown_headings(sample_report["md"]) if h not in found["h2"]] == []
    assert len(found["svgs"]) == 3                            # survival, load curve, latency
    page_width = max(svg["box"][2] for svg in found["svgs"])
    for svg in found["svgs"]:
        width, height = svg["box"][2:]
        assert width > 1000 and width == page_width and height > 200   # the page's width, scaled
    # survival: 1 axes; load curve: speedup and accept length; latency: ttft, tpot, itl, max_stall
    assert [len(svg["axes"]) for svg in found["svgs"]] == [1, 2, 4]
    counts = coloured_pixels(browser, tmp_path, sample_html, found)
    assert all(n > 500 for chart in counts for n in chart), counts   # every axes shows data
    assert found["emptyTables"] == 0


@pytest.fixture
def response_only_html(tmp_path) -> tuple[Path, str]:
    """A trace imported from vLLM responses alone (no steps table): its HTML page and Markdown."""
    traces = tmp_path / "responses"
    fixtures = ROOT / "tests" / "fixtures"
    for src, dep, extra in (("vllm_responses.jsonl", "eagle-a", ["--method", "eagle3"]),
                            ("vllm_responses_plain.jsonl", "base", [])):
        result = CliRunner().invoke(main, ["import", "vllm-responses", str(fixtures / src), "--deployment", dep,
                                           *extra, "--out", str(traces)])
        assert result.exit_code == 0, result.output
    pages = {}
    for fmt in ("html", "md"):
        result = CliRunner().invoke(main, ["report", str(traces), "--format", fmt, "--no-progress"])
        assert result.exit_code == 0, result.output
        pages[fmt] = result.stdout
    out = tmp_path / "responses.html"
    out.write_text(pages["html"], encoding="utf-8")
    return out, pages["md"]


def test_browser_response_only_page_has_no_empty_chart(response_only_html, tmp_path):
    page, md = response_only_html
    browser = chromium()
    found = probe(browser, tmp_path, page)
    # survival (positions come from the responses) and latency with its two metrics that have
    # values (ttft, tpot); no load curve, and no itl or max_stall axes: those need steps
    assert [len(svg["axes"]) for svg in found["svgs"]] == [1, 2]
    counts = coloured_pixels(browser, tmp_path, page, found)
    assert all(n > 500 for chart in counts for n in chart), counts
    assert found["emptyTables"] == 0
    # the Markdown leaves out the sections that need steps and says why, once, so the page
    # shows every heading it has; the numbers run on without a gap
    text = page.read_text()
    assert [h for h in markdown_headings(md) if h not in found["h2"]] == []
    numbered = [h for h in markdown_headings(md) if h[0].isdigit()]
    assert [int(h.split(".")[0]) for h in numbered] == list(range(1, len(numbered) + 1))
    assert not any("Round ledger" in h or "Load curve" in h or "Speculation length" in h for h in found["h2"])
    why = "so the round ledger, the load curve, context length and speculation length are left out"
    assert md.count(why) == 1 and text.count(why) == 1
    assert "Findings" in found["h2"]
