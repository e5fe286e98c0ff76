"""Concurrent nightly runs and the history lock (issue 12, section 3).

Every run reads ``history.parquet``, merges its date in and renames a new file
over it. Without a lock held from the read to the rename, runs that overlap
lose each other's rows (the last rename wins); with it, every row survives. A
run that cannot get the lock in time raises ``HistoryLocked`` naming the lock
file.
"""

import datetime as dt
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import polars as pl
import pytest

from analyzer.analysis import history
from analyzer.errors import EnvironmentProblem
from analyzer.nightly import run_nightly
from analyzer.simulate.traces import simulate

ROOT = Path(__file__).resolve().parents[1]

# Gates and regression limits no simulated day can trip. A run still exits 1 by report
# --check's rule: a simulated day of 2 requests leaves every speculative deployment
# without a speedup (its baseline's load cells are below the [evidence] floors: the verdict
# is "unknown"), and only ship or cap passes.
LOOSE = """\
[gates.correctness]
min_match_rate = 0.0
[gates.quality]
max_quality_drop = 1e9
[gates.latency]
ttft_p99_ms = 1e9
tpot_p95_ms = 1e9
max_stall_p99_ms = 1e9
[gates.capacity]
min_speedup = 0.0
max_preemptions_per_request = 1e9
[regression]
max_accept_length_drop = 1e9
max_speedup_drop = 1e9
max_tpot_p99_rise = 1e9
"""


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("traces")
    simulate(root, seed=3, requests=2, days=3)
    return root


def partition_dates(traces: Path) -> list[str]:
    return sorted(p.name.removeprefix("date=") for p in (traces / "rounds").iterdir())


def day_rows(date: dt.date, deployments: int = 2) -> pl.DataFrame:
    return pl.DataFrame([{"date": date, "deployment_id": f"d{i}", "speedup": 1.0} for i in range(deployments)],
                        schema=history.HISTORY_SCHEMA)


def test_three_nightly_runs_started_together_keep_every_date(traces, tmp_path):
    dates = partition_dates(traces)
    assert len(dates) == 3
    config = tmp_path / "loose.toml"
    config.write_text(LOOSE)
    out = tmp_path / "out"
    runs = [subprocess.Popen([sys.executable, "-m", "analyzer", "nightly", str(traces), "--date", date,
                              "--out", str(out), "--config", str(config), "--no-progress"],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for date in dates]
    results = [(*run.communicate(timeout=300), run.returncode) for run in runs]
    # each run finished its report and exits by the check rule alone: 1, with one stderr line
    # per speculative deployment whose verdict is neither ship nor cap, and no regression
    for date, (stdout, stderr, code) in zip(dates, results):
        verdicts = json.loads((out / date / "report.json").read_text())["verdict"]
        speculative = [v for v in verdicts if v["action"] != "baseline"]
        assert speculative and {v["action"] for v in speculative} == {"unknown"}, (date, verdicts)
        assert code == 1, (date, stdout, stderr)
        assert [line.split(": ", 2)[:2] for line in stderr.splitlines()] == [
            [v["deployment_id"], "unknown"] for v in speculative], (date, stderr)
        assert "regression:" not in stdout and f"wrote {out / date}/report.md" in stdout

    rows = pl.read_parquet(out / "history.parquet")
    assert sorted(d.isoformat() for d in rows.get_column("date").unique()) == dates
    per_date = rows.group_by("date").len().get_column("len").to_list()
    deployments = pl.read_parquet(traces / "deployments").get_column("deployment_id").n_unique()
    assert per_date == [deployments] * 3
    assert rows.group_by(["date", "deployment_id"]).len().get_column("len").max() == 1
    for date in dates:
        assert (out / date / "report.json").exists()
    assert history.lock_path(out / "history.parquet").exists()  # left in place on release


# Each worker waits for the go file, so all of them read, merge and rename at once.
WORKER = textwrap.dedent("""\
    import datetime as dt, sys, time
    from pathlib import Path
    import polars as pl
    from analyzer.analysis import history

    path, go, worker, count = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    while not go.exists():
        time.sleep(0.001)
    for i in range(count):
        date = dt.date(2026, 1, 1) + dt.timedelta(days=worker * count + i)
        day = pl.DataFrame([{"date": date, "deployment_id": f"d{j}", "speedup": float(worker)} for j in range(2)],
                           schema=history.HISTORY_SCHEMA)
        history.upsert(path, day, timeout=120)
    """)


def test_concurrent_upserts_from_several_processes_lose_nothing(tmp_path):
    workers, count = 4, 15
    path = tmp_path / "out" / "history.parquet"
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(path), str(go), str(w), str(count)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in range(workers)]
    time.sleep(1.0)  # let every worker import polars and reach its wait loop
    go.touch()
    results = [(*p.communicate(timeout=300), p.returncode) for p in procs]
    assert [code for _, _, code in results] == [0] * workers, results

    rows = history.read_history(path)
    expected = {dt.date(2026, 1, 1) + dt.timedelta(days=n) for n in range(workers * count)}
    lost = expected - set(rows.get_column("date").to_list())
    assert not lost, f"{len(lost)} of {len(expected)} dates lost"
    assert rows.height == 2 * workers * count
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".history-")] == []


def test_a_run_that_cannot_get_the_lock_in_time_raises_naming_the_lock_file(tmp_path):
    path = tmp_path / "history.parquet"
    history.upsert(path, day_rows(dt.date(2026, 1, 1)))
    before = path.read_bytes()
    with history.locked(path):
        started = time.monotonic()
        with pytest.raises(history.HistoryLocked) as caught:
            history.upsert(path, day_rows(dt.date(2026, 1, 2)), timeout=0.2)
        waited = time.monotonic() - started
    assert 0.2 <= waited < 5
    message = str(caught.value)
    assert str(tmp_path / "history.parquet.lock") in message and "0.2 s" in message
    assert "\n" not in message
    assert isinstance(caught.value, EnvironmentProblem) and caught.value.exit_code == 3
    assert path.read_bytes() == before
    # released: the same update now goes through at once
    history.upsert(path, day_rows(dt.date(2026, 1, 2)), timeout=0)
    assert history.read_history(path).get_column("date").n_unique() == 2


def test_the_lock_is_held_against_another_process(tmp_path):
    path = tmp_path / "history.parquet"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from analyzer.analysis import history\n"
                               "with history.locked(Path(sys.argv[1])):\n"
                               "    print('held', flush=True); sys.stdin.readline()", str(path)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(history.HistoryLocked, match="history.parquet.lock"):
            history.upsert(path, day_rows(dt.date(2026, 1, 1)), timeout=0.2)
    finally:
        holder.communicate("\n", timeout=60)
    assert not path.exists()
    history.upsert(path, day_rows(dt.date(2026, 1, 1)), timeout=0)
    assert path.exists()


def test_nightly_waits_no_longer_than_its_lock_timeout(traces, tmp_path):
    date = partition_dates(traces)[0]
    out = tmp_path / "out"
    with history.locked(out / "history.parquet"):
        with pytest.raises(history.HistoryLocked, match="history.parquet.lock"):
            run_nightly(traces, date, out, lock_timeout=0.2)
    assert not (out / "history.parquet").exists()


def test_the_lock_is_released_on_an_error_and_its_file_is_kept(tmp_path):
    path = tmp_path / "history.parquet"
    with pytest.raises(RuntimeError, match="boom"):
        with history.locked(path):
            raise RuntimeError("boom")
    with history.locked(path, timeout=0):
        pass
    assert (tmp_path / "history.parquet.lock").exists()
