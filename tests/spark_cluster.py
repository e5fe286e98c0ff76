"""A Spark standalone cluster on 127.0.0.1 for the tests: one master and one worker,
started from the pyspark package's own ``spark-class`` and stopped by their process ids.

Every process (master, worker, and the driver the tests start) binds to 127.0.0.1
(``SPARK_LOCAL_IP``): otherwise Spark picks the host's other interface and the executors
try to connect there. The executors get Spark's default heap (1 GB), as on a fleet's
cluster left at its defaults.

The worker offers 4 cores (on a 2-core machine: they are task slots) and each
application takes 2 (``APP_CORES``, Spark's ``spark.cores.max``): the tests' own driver
keeps its executor while a second application (``spark-submit``, a CLI process) runs
beside it. Without the cap the first application takes every core and the second waits
for resources forever.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"
APP_CORES = 2


@dataclass
class Cluster:
    master_url: str
    ui_port: int
    processes: list[subprocess.Popen]
    log_dir: Path

    def alive_workers(self) -> int:
        with urllib.request.urlopen(f"http://{HOST}:{self.ui_port}/json/", timeout=5) as page:
            state = json.load(page)
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def stop(self) -> None:
        # the worker first, so the master does not log it as lost; each spark-class is its
        # own process group (start_new_session), its JVM included
        for process in reversed(self.processes):
            _stop(process)

    def executor_pids(self) -> list[int]:
        """The process ids of the worker's executor JVMs: children of the worker, in its
        process group (read from /proc: ps cuts its lines at 80 columns off a terminal)."""
        worker = self.processes[-1].pid
        return sorted(pid for pid, _parent, group, command in processes()
                      if group == worker and b"CoarseGrainedExecutorBackend" in b" ".join(command))

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.log_dir.glob("*.log")))


def processes():
    """(pid, parent pid, process group, command line split at NULs) of every process, read
    from /proc: ps cuts its lines at 80 columns off a terminal."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            command = (proc / "cmdline").read_bytes()
        except OSError:                 # ended while listed
            continue
        fields = stat.rsplit(")", 1)[1].split()     # pid (comm) state ppid pgrp
        yield int(proc.name), int(fields[1]), int(fields[2]), command.split(b"\0")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def cluster_environment() -> dict[str, str]:
    """What every process of the cluster, the driver included, runs with."""
    env = dict(os.environ)
    env.update({"SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": HOST,
                "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable})
    return env


def start_cluster(log_dir: Path, cores: int = 2 * APP_CORES, memory: str = "4g", timeout: float = 90.0) -> Cluster:
    """A master and one worker of ``cores`` cores, registered and alive; raises with
    their logs when they are not up within ``timeout`` seconds."""
    log_dir.mkdir(parents=True, exist_ok=True)
    env = cluster_environment()
    spark_class = str(spark_home() / "bin" / "spark-class")
    port, ui_port, worker_ui = free_port(), free_port(), free_port()
    master_url = f"spark://{HOST}:{port}"
    processes = []

    def start(name: str, *args: str) -> None:
        log = open(log_dir / f"{name}.log", "wb")
        processes.append(subprocess.Popen([spark_class, *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))

    start("master", "org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(port),
          "--webui-port", str(ui_port))
    cluster = Cluster(master_url, ui_port, processes, log_dir)
    try:
        _wait(lambda: _answers(ui_port), timeout, "the master's web UI")
        start("worker", "org.apache.spark.deploy.worker.Worker", master_url, "--host", HOST,
              "--cores", str(cores), "--memory", memory, "--webui-port", str(worker_ui),
              "--work-dir", str(log_dir / "work"))
        _wait(lambda: cluster.alive_workers() >= 1, timeout, "a worker registered with the master")
    except Exception:
        logs = cluster.logs()
        cluster.stop()
        raise RuntimeError(f"the standalone cluster did not start:\n{logs}") from None
    return cluster


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/json/", timeout=2):
            return True
    except OSError:
        return False


def _wait(ready, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{what} within {timeout:.0f} s")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)
