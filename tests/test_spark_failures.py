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
    # the JVM's own start-up lines come first (log4j's profile, the incubator modules); specan's is one line
    assert "Traceback" not in run.stderr
    (line,) = [x for x in run.stderr.splitlines() if x.startswith("Error:")]
    assert run.stderr.rstrip().endswith(line)
    assert line.startswith("Error: a result is too large for the driver (Total size of serialized results of ")
    assert "is bigger than spark.driver.maxResultSize (64.0 KiB)" in line
    assert line.endswith("raise spark.driver.maxResultSize (--conf spark.driver.maxResultSize=4g), or run "
                         "`specan load --engine spark --out DIR` to have the executors write it")


def test_other_failures_stay_internal_errors():
    # a bug of specan's is not the cluster's: it must still say "report it"
    assert spark_failure(ValueError("An error occurred while calling o42.sql: [PARSE_SYNTAX_ERROR]")) is None
