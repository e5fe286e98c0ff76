"""The cluster's failures as one line naming the cause and the setting to change, exit 3
(analyzer.spark.session.spark_failure): each caused for real here, in a Spark of its own
(a fresh `specan` process, so its JVM starts with the limit under test)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer.cli import main
from analyzer.spark import session
from analyzer.spark.session import spark_failure
from spark_cluster import free_port

pytestmark = pytest.mark.xdist_group("spark")

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces"


def specan(*args: str, submit_args: str = "") -> subprocess.CompletedProcess:
    """The CLI in a process of its own; ``submit_args`` are the spark-submit options its JVM starts with."""
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f"{submit_args} pyspark-shell".strip()}
    return subprocess.run([sys.executable, "-m", "analyzer", *args], env=env, capture_output=True, text=True,
                          timeout=900)


def test_a_master_nobody_answers_at_is_one_line_at_once():
    port = free_port()                      # bound and released: nothing listens there
    result = CliRunner().invoke(main, ["report", str(SAMPLE), "--engine", "spark",
                                       "--spark-master", f"spark://127.0.0.1:{port}"])
    assert result.exit_code == 3
    assert result.output == (f"Error: cannot reach the Spark master spark://127.0.0.1:{port} "
                             f"(127.0.0.1:{port}: Connection refused): is it running? check --spark-master\n")


def test_a_result_too_large_for_the_driver_names_the_setting():
    run = specan("report", str(SAMPLE), "--engine", "spark", "--spark-master", "local[1]",
                 submit_args="--conf spark.driver.maxResultSize=64k")
    assert run.returncode == 3, run.stderr
    # specan's is one line; before it only what the JVM prints before any log configuration
    # (the incubator modules, the shell's log-level hint): not log4j's profile nor its warnings
    assert "Traceback" not in run.stderr
    assert "log4j" not in run.stderr and " WARN " not in run.stderr, run.stderr
    (line,) = [x for x in run.stderr.splitlines() if x.startswith("Error:")]
    assert run.stderr.rstrip().endswith(line)
    assert line.startswith("Error: a result is too large for the driver (Total size of serialized results of ")
    assert "is bigger than spark.driver.maxResultSize (64.0 KiB)" in line
    assert line.endswith("raise spark.driver.maxResultSize (--conf spark.driver.maxResultSize=4g), or run "
                         "`specan load --engine spark --out DIR` to have the executors write it")


def test_other_failures_stay_internal_errors():
    # a bug of specan's is not the cluster's: it must still say "report it"
    assert spark_failure(ValueError("An error occurred while calling o42.sql: [PARSE_SYNTAX_ERROR]")) is None


# Spark's own lines from users' reports (each issue named), as py4j relays them: the
# one-line message quotes the cause and names the setting
REPORTED = [
    # mozilla/telemetry-airflow#330 (YARN, a container killed)
    ("py4j.protocol.Py4JJavaError: An error occurred while calling o123.collectToPython.\n"
     ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 3 in stage 1.0 failed 4 times, "
     "most recent failure: Lost task 3.3 in stage 1.0 (TID 7243, ip-172-31-3-156.us-west-2.compute.internal, "
     "executor 5): ExecutorLostFailure (executor 5 exited caused by one of the running tasks) Reason: Container "
     "marked as failed: container_1532995648738_0001_01_000006 on host: ip-172-31-3-156.us-west-2.compute.internal. "
     "Exit status: 137. Diagnostics: Container killed on request. Exit code is 137\n"
     "Container exited with a non-zero exit code 137\nKilled by external signal\n\nDriver stacktrace:",
     "an executor was lost (ExecutorLostFailure (executor 5 exited caused by one of the running tasks) Reason: "
     "Container marked as failed: container_1532995648738_0001_01_000006 on host: ",
     "spark.executor.memoryOverhead"),
    # spark-jobserver/spark-jobserver#149
    ("Job aborted due to stage failure: Task 0 in stage 0.0 failed 4 times, most recent failure: Lost task 0.3 in "
     "stage 0.0 (TID 7, kafka.cds.softlayer.com): ExecutorLostFailure (executor 0 lost)\nDriver stacktrace:",
     "an executor was lost (ExecutorLostFailure (executor 0 lost)): ", "--spark-checkpoint-dir DIR"),
    # NVIDIA/cudf-spark#14903 (Spark 4's error class)
    ("py4j.protocol.Py4JJavaError: An error occurred while calling o732836.collectToPython.\n: "
     "org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 13547.0 failed 1 times, "
     "most recent failure: Lost task 0.0 in stage 13547.0 (TID 33405) (ip-10-59-156-36.us-west-2.compute.internal "
     "executor driver): org.apache.spark.memory.SparkOutOfMemoryError: [UNABLE_TO_ACQUIRE_MEMORY] Unable to "
     "acquire 65536 bytes of memory, got 0. SQLSTATE: 53200\n\tat org.apache.spark.errors.SparkCoreErrors$."
     "outOfMemoryError(SparkCoreErrors.scala:476)",
     "Spark ran out of memory (SparkOutOfMemoryError: [UNABLE_TO_ACQUIRE_MEMORY] Unable to acquire 65536 bytes "
     "of memory, got 0. SQLSTATE: 53200): ", "spark.sql.shuffle.partitions"),
    # sparklyr/sparklyr#1272
    ("Error: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 6.0 failed 4 "
     "times, most recent failure: Lost task 0.3 in stage 6.0 (TID 9, houdcda02.mnet.com, executor 2): "
     "java.lang.OutOfMemoryError: GC overhead limit exceeded\n\tat java.lang.String.<init>(String.java:325)",
     "Spark ran out of memory (java.lang.OutOfMemoryError: GC overhead limit exceeded): ",
     "spark.executor.memory"),
    # SHSE/spark-es#3 (YARN): the driver dropped executors whose heartbeats it did not get
    ("16/11/06 17:32:21 ERROR cluster.YarnScheduler: Lost executor 8 on dayrhewdld006.enterprisenet.org: "
     "Executor heartbeat timed out after 124251 ms",
     "the executors' heartbeats went unanswered (Executor heartbeat timed out after 124251 ms): ",
     "SPARK_DRIVER_MEMORY=4g"),
    # parsa-epfl/cloudsuite#200: an executor's heartbeat the driver did not answer
    ("19/01/02 16:23:00 WARN NettyRpcEnv: Ignored failure: java.util.concurrent.TimeoutException: Cannot "
     "receive any reply in 10 seconds",
     "the executors' heartbeats went unanswered (Cannot receive any reply in 10 seconds): ",
     "spark.executor.memory"),
]


@pytest.mark.parametrize("text, starts, names", REPORTED)
def test_reported_cluster_failures_are_one_line_naming_the_setting(text, starts, names):
    failure = spark_failure(RuntimeError(text))
    assert failure is not None and failure.exit_code == 3
    message = str(failure)
    assert "\n" not in message and message.startswith(starts) and names in message


def test_the_spark_group_keeps_to_one_worker(request):
    # --dist loadgroup (pyproject's addopts) runs a group's tests on one worker only when
    # pytest-xdist can add the group to each test's id: with pytest 9 it cannot, and the
    # Spark tests ran on both workers at once, each starting its own JVMs (and the cluster
    # module its own cluster), past CI's time limit. pyproject keeps pytest below 9.
    if getattr(request.config.option, "loadgroup", False):
        assert request.node.nodeid.endswith("@spark"), request.node.nodeid


@pytest.mark.parametrize("setting", [
    {"PYSPARK_SUBMIT_ARGS": "--driver-memory 6g pyspark-shell"},
    {"PYSPARK_SUBMIT_ARGS": "--conf spark.driver.memory=6g pyspark-shell"},
    {"SPARK_DRIVER_MEMORY": "6g"},
    "spark-defaults.conf",
])
def test_the_users_driver_memory_is_left_as_set(setting, tmp_path, monkeypatch):
    # specan gives the driver JVM it starts 2g only where the user set nothing that
    # spark-submit reads (the cluster test checks the -Xmx of a CLI run with nothing set)
    for key in ("PYSPARK_SUBMIT_ARGS", "SPARK_DRIVER_MEMORY", "SPARK_MEM", "SPARK_CONF_DIR", "SPARK_HOME"):
        monkeypatch.delenv(key, raising=False)
    assert not session._driver_memory_set()
    if setting == "spark-defaults.conf":
        (tmp_path / "spark-defaults.conf").write_text("spark.executor.memory 4g\n")
        monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
        assert not session._driver_memory_set()
        (tmp_path / "spark-defaults.conf").write_text("spark.executor.memory 4g\nspark.driver.memory   6g\n")
    else:
        for key, value in setting.items():
            monkeypatch.setenv(key, value)
    assert session._driver_memory_set()


def test_an_unknown_java_failure_quotes_its_java_cause():
    # pyspark's first line names only the call ("An error occurred while calling o29.sql.");
    # the one-line message quotes the innermost Java cause instead
    class Java:
        def __init__(self, text, cause=None):
            self.text, self.cause = text, cause

        def getCause(self):
            return self.cause

        def toString(self):
            return self.text

    error = RuntimeError("An error occurred while calling o29.sql.\n: org.apache.spark.SparkException: ...")
    error.java_exception = Java("org.apache.spark.SparkException: Job aborted",
                                Java("java.lang.StackOverflowError"))
    assert session.spark_error_text(error) == "java.lang.StackOverflowError"
    assert session.spark_error_text(ValueError("one\ntwo")) == "one"
