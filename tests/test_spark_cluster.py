"""The Spark engine on a real cluster: a standalone master and one worker on 127.0.0.1
(tests/spark_cluster.py), the executors in their own JVMs at Spark's default 1 GB heap.

Of the parity tests of tests/test_spark.py, those whose work differs on a cluster run
here again, against spark://127.0.0.1:PORT: the sample at full size (the kept tables as
persisted blocks on the executor), the rejected rows the executors write, and `load --out`,
whose Parquet the executors write from a partitioned file:// URI listed through Hadoop.
Each gives the same document as the DuckDB engine, every key, the bootstrap intervals
included, to 1e-9. The others run the same SQL on the same kinds of frames, and their
traces are covered here by the ones that stay: the seed's traces three times below, the
dirty traces by the rejected rows' test, the partitioned ones by `load --out`. On a
cluster specan keeps its tables as persisted blocks (a lost executor's are recomputed),
or with --spark-checkpoint-dir as reliable checkpoints; both are run here.
`spark-submit` of the CLI is run once."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from analyzer import api
from spark_cluster import APP_CORES, HOST, cluster_environment, processes, spark_home, start_cluster
from test_spark import differences, document
# the parity tests whose work differs on a cluster, collected again here with this module's
# `spark` fixture (the cluster)
from test_spark import (test_load_out_then_report_the_directory_on_a_laptop,  # noqa: F401
                        test_rejected_rows_are_written_by_the_executors_and_only_examples_come_back,
                        test_sample_traces_give_the_same_document)
from test_metrics_seed import cheap, write_seed_traces

# a group of its own: its driver is another xdist worker's JVM, beside test_spark.py's
pytestmark = pytest.mark.xdist_group("spark-cluster")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = start_cluster(tmp_path_factory.mktemp("spark-cluster"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def spark(cluster):
    """The driver's session at the cluster's master (the one this process's other Spark
    tests use, in local mode, is stopped first: one SparkContext per JVM). The API and
    the CLI find it (SparkSession.getActiveSession), as they would inside spark-submit."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-memory 2g pyspark-shell")
    for key in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON"):
        os.environ[key] = cluster_environment()[key]
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    session = (SparkSession.builder.master(cluster.master_url).appName("specan-tests")
               .config("spark.driver.host", HOST).config("spark.driver.bindAddress", HOST)
               .config("spark.cores.max", str(APP_CORES))
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .getOrCreate())
    session.sparkContext.setLogLevel("OFF")
    assert session.sparkContext.master == cluster.master_url
    yield session
    session.stop()


def test_the_executors_are_the_clusters(spark, cluster):
    # the work runs in the worker's executor JVM, not in the driver: a job waits for one
    assert spark.range(1000).selectExpr("sum(id)").first()[0] == 499500
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
    assert executors == 2                       # the driver's block manager and the worker's executor
    assert cluster.alive_workers() == 1


def test_a_checkpoint_dir_keeps_the_tables_as_reliable_checkpoints(spark, tmp_path):
    write_seed_traces(tmp_path / "traces", 4, cheap)
    duck = document(tmp_path / "traces", "duckdb")
    checkpoints = tmp_path / "checkpoints"
    ws = api.open_traces(tmp_path / "traces", engine="spark", spark_checkpoint_dir=str(checkpoints))
    try:
        assert differences(duck, json.loads(api.to_json(api.report_document(ws)))) == []
    finally:
        ws.close()
    # Spark writes each checkpoint as rdd-N folders under one folder per application
    written = [p for p in checkpoints.rglob("rdd-*") if p.is_dir()]
    assert written, f"no checkpoint written under {checkpoints}"


def test_spark_submit_runs_the_cli_on_the_cluster(cluster, tmp_path):
    traces = write_seed_traces(tmp_path / "traces", 4, cheap)
    submit = spark_home() / "bin" / "spark-submit"
    entry = Path(api.__file__).resolve().parent / "__main__.py"
    out = tmp_path / "report.json"
    env = {**cluster_environment(), "PYTHONPATH": os.pathsep.join(sys.path)}
    run = subprocess.run([str(submit), "--master", cluster.master_url, "--total-executor-cores", str(APP_CORES),
                          "--conf", "spark.ui.enabled=false", str(entry), "report", str(traces),
                          "--engine", "spark", "--format", "json", "-o", str(out)],
                         env=env, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    assert differences(document(traces, "duckdb"), json.loads(out.read_text())) == []


def test_a_lost_executor_is_recomputed_and_the_report_completes(cluster, tmp_path):
    # the CLI exactly as a user runs it, nothing set but --spark-master (no PYSPARK_SUBMIT_ARGS:
    # the driver's memory is specan's default, the application takes the cores left). The
    # executor's JVM is killed once the run has kept tables on it (the clean rounds,
    # request_rounds): their blocks are gone with it, Spark recomputes them from their
    # lineage on the executor the master starts next, and the document is the same
    traces = write_seed_traces(tmp_path / "traces", 4, cheap)
    out = tmp_path / "report.json"
    env = {k: v for k, v in cluster_environment().items()
           if k not in ("PYSPARK_SUBMIT_ARGS", "SPARK_DRIVER_MEMORY", "SPARK_CONF_DIR")}
    before = set(cluster.executor_pids())
    run = subprocess.Popen([sys.executable, "-m", "analyzer", "report", str(traces), "--engine", "spark",
                            "--spark-master", cluster.master_url, "--format", "json", "-o", str(out), "--progress"],
                           env=env, stderr=subprocess.PIPE, text=True)
    killed, lines, seen, heaps = [], [], [], []
    for line in run.stderr:
        lines.append(line)
        if not killed and "computing request_repetition on Spark" in line:
            heaps = driver_heaps(run.pid)
            seen = cluster.executor_pids()
            killed = [pid for pid in seen if pid not in before]
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
    assert run.wait(timeout=1200) == 0, "".join(lines)[-3000:]
    assert len(killed) == 1, f"the run's executor was not found: {before} before, {seen} then"
    assert heaps == ["-Xmx2g"]          # analyzer.spark.session.DEFAULT_DRIVER_MEMORY_GB, not Spark's 1g
    assert differences(document(traces, "duckdb"), json.loads(out.read_text())) == []


def driver_heaps(parent: int) -> list[str]:
    """The -Xmx of the driver JVMs a process started (its children running SparkSubmit)."""
    return [arg.decode() for _pid, ppid, _group, command in processes()
            if ppid == parent and b"org.apache.spark.deploy.SparkSubmit" in command
            for arg in command if arg.startswith(b"-Xmx")]
