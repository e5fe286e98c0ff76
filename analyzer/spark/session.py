"""The Spark session specan runs on: the one already running (inside spark-submit, a
notebook on the cluster), or a new one at ``--spark-master`` (default ``local[*]``).

pyspark is an extra (``pip install 'specan[spark]'``): the default install needs no
Java. Everything Spark-specific that can fail before any data is read (no pyspark,
no Java) is turned into one line here.
"""

from __future__ import annotations

import logging
import os

from ..errors import EnvironmentProblem, InputProblem

DEFAULT_MASTER = "local[*]"

# Settings specan's SQL relies on, set on every session it uses (an existing one too):
# timestamps are UTC like DuckDB's, and the rules' joins and hashes see the same types.
SESSION_SETTINGS = {
    "spark.sql.session.timeZone": "UTC",
    # Hive partition values typed as DuckDB types them (date=2026-11-27 is a DATE)
    "spark.sql.sources.partitionColumnTypeInference.enabled": "true",
    # DECIMAL products keep every digit, as DuckDB's do (the exact time sums of the cost
    # fit); by default Spark rounds a product whose precision passes 38
    "spark.sql.decimalOperations.allowPrecisionLoss": "false",
}


def spark_session(master: str | None = None):
    """The active session when there is one and no master is asked for, else a new one."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise EnvironmentProblem("--engine spark needs pyspark: pip install 'specan[spark]'") from None
    session = SparkSession.getActiveSession()
    if session is None or master is not None:
        if master is not None and not master.strip():
            raise InputProblem("--spark-master is empty: expected e.g. local[4], yarn, k8s://HOST:PORT")
        builder = SparkSession.builder.appName("specan").config("spark.ui.showConsoleProgress", "false")
        # under spark-submit (which starts the JVM and hands pyspark its gateway) the master
        # and every --conf come from spark-submit
        submitted = "PYSPARK_GATEWAY_PORT" in os.environ
        if master is not None or not submitted:
            builder = builder.master(master or DEFAULT_MASTER)
        if not submitted and (master or DEFAULT_MASTER).startswith("local"):
            # One machine: no UI, and shuffles in as many partitions as it has cores
            # (Spark's default of 200 costs more in task overhead than small stages take)
            builder = (builder.config("spark.ui.enabled", "false")
                       .config("spark.sql.shuffle.partitions", str(max(2, 2 * (os.cpu_count() or 1)))))
        # py4j and pyspark log every Java exception they relay; specan turns them into one line
        for logger in ("py4j", "SQLQueryContextLogger", "pyspark"):
            logging.getLogger(logger).setLevel(logging.CRITICAL)
        try:
            session = builder.getOrCreate()
        except Exception as exc:   # pyspark raises its own types, or RuntimeError, when Java is missing
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            java = "" if os.environ.get("JAVA_HOME") or _on_path("java") else \
                " (no Java runtime found: Spark needs one, e.g. apt install default-jre-headless)"
            raise EnvironmentProblem(f"cannot start Spark at {master or DEFAULT_MASTER}: {text}{java}") from None
        session.sparkContext.setLogLevel("OFF")
    for key, value in SESSION_SETTINGS.items():
        session.conf.set(key, value)
    return session


def _on_path(program: str) -> bool:
    import shutil
    return shutil.which(program) is not None
