"""A stop signal (a scheduler's timeout, a closed terminal, Ctrl-C) removes the run's
scratch folder and exits 128 + N with one line (docs/commands.md, exit status).

Each test runs `specan report` in a process of its own on the sample traces with the
file-backed scratch database (SPECAN_FILE_DATABASE_BYTES=1 lowers its 64 MiB bound),
waits until the database file exists, sends the signal, and looks at what is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def start_report(temp_dir: Path, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, SPECAN_FILE_DATABASE_BYTES="1", SPECAN_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "analyzer", "report", "sample_traces/", "--temp-dir",
                             str(temp_dir), *extra], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for_scratch_database(proc: subprocess.Popen, temp_dir: Path, timeout: float = 120) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = list(temp_dir.glob("specan-*/scratch.duckdb"))
        if found:
            return found[0]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    proc.kill()
    raise AssertionError("no scratch database appeared")


@pytest.mark.parametrize("stop, status", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_stop_signal_removes_the_scratch_folder(tmp_path, stop, status):
    proc = start_report(tmp_path)
    scratch = wait_for_scratch_database(proc, tmp_path)
    proc.send_signal(stop)
    stdout, stderr = proc.communicate(timeout=120)
    # SIGTERM used to kill the run where it stood (status -15) and leave scratch.duckdb behind;
    # SIGINT ended as "internal error (RuntimeError: Query interrupted)", exit 3
    assert (proc.returncode, stderr, stdout) == (status, f"Error: stopped by {stop.name}\n", "")
    assert not scratch.parent.exists()
    assert list(tmp_path.iterdir()) == []


def test_without_a_signal_the_same_run_finishes_and_removes_its_folder(tmp_path):
    # the run the signals interrupt: it does reach the file database, and ends cleanly
    proc = start_report(tmp_path, "--format", "json")
    wait_for_scratch_database(proc, tmp_path)
    stdout, stderr = proc.communicate(timeout=300)
    assert (proc.returncode, stderr) == (0, "")
    assert stdout.startswith("{")
    assert list(tmp_path.iterdir()) == []


def test_a_bound_that_is_not_a_number_is_refused(tmp_path):
    env = dict(os.environ, SPECAN_FILE_DATABASE_BYTES="64MB")
    result = subprocess.run([sys.executable, "-m", "analyzer", "validate", "sample_traces/", "--temp-dir",
                             str(tmp_path)], cwd=ROOT, env=env, text=True, capture_output=True)
    assert (result.returncode, result.stderr) == (
        2, "Error: SPECAN_FILE_DATABASE_BYTES='64MB' is not a whole number of bytes\n")
    assert list(tmp_path.iterdir()) == []
