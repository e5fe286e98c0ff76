"""The Spark session specan runs on: the one already running (inside spark-submit, a
notebook on the cluster), or a new one at ``--spark-master`` (default ``local[*]``).

pyspark is an extra (``pip install 'specan[spark]'``): the default install needs no
Java. Everything Spark-specific that can fail before any data is read (no pyspark,
no Java, a master nobody answers at) is turned into one line here, and so are the
cluster's own failures while it works (``spark_failure``).

``engine_session`` is how a run uses the session: it sets what specan's SQL relies on,
chooses how tables are kept (``materialize``), and when the run ends puts the user's
settings back and releases what the run kept and named.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import re
import socket
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EnvironmentProblem, InputProblem, InternalError, SpecanError, first_line

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
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
SPARK_DEFAULT_SHUFFLE_PARTITIONS = "200"
# The driver's heap when specan starts the driver JVM and the user set none: Spark's own
# default (1 GB) is too small for the plans of specan's views on a cluster, where the
# driver also tracks every executor's blocks (a 6-deployment trace ran it into minutes of
# garbage collection and lost heartbeats). Below twice that in the machine's memory,
# Spark's default stays. The user's own setting always wins (``_driver_memory_set``).
DEFAULT_DRIVER_MEMORY_GB = 2
# How long a spark:// master has to answer before specan says it cannot reach it (Spark's
# own client retries for a minute and then stops the context)
MASTER_CONNECT_SECONDS = 5.0


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
        check_master_answers(master or DEFAULT_MASTER)
        builder = SparkSession.builder.appName("specan").config("spark.ui.showConsoleProgress", "false")
        # under spark-submit (which starts the JVM and hands pyspark its gateway) the master
        # and every --conf come from spark-submit
        submitted = "PYSPARK_GATEWAY_PORT" in os.environ
        if master is not None or not submitted:
            builder = builder.master(master or DEFAULT_MASTER)
        if not submitted and (master or DEFAULT_MASTER).startswith("local"):
            builder = builder.config("spark.ui.enabled", "false")
        memory = None if submitted else default_driver_memory()
        if memory is not None:
            builder = builder.config("spark.driver.memory", memory)
        if not submitted and _quiet_start_wanted():
            builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={QUIET_LOG_CONFIG}")
        # py4j and pyspark log every Java exception they relay; specan turns them into one line
        for logger in ("py4j", "SQLQueryContextLogger", "pyspark"):
            logging.getLogger(logger).setLevel(logging.CRITICAL)
        # pyspark checks the pandas version when Arrow batches come back, and warns of a newer
        # pandas than it was tested with; specan hands pandas nothing
        warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas",
                                category=FutureWarning)
        try:
            session = builder.getOrCreate()
        except Exception as exc:   # pyspark raises its own types, or RuntimeError, when Java is missing
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            java = "" if os.environ.get("JAVA_HOME") or _on_path("java") else \
                " (no Java runtime found: Spark needs one, e.g. apt install default-jre-headless)"
            raise EnvironmentProblem(f"cannot start Spark at {master or DEFAULT_MASTER}: {text}{java}") from None
        session.sparkContext.setLogLevel("OFF")
    return session


# The log configuration of a driver JVM specan starts (analyzer/spark/log4j2.properties)
QUIET_LOG_CONFIG = Path(__file__).resolve().parent / "log4j2.properties"


def _quiet_start_wanted() -> bool:
    """Whether the driver JVM specan is about to start may take the quiet log configuration:
    not when the JVM is already running (its logging is set), nor when the user gives the
    driver's Java options. (After the start specan turns Spark's log off either way.)"""
    from pyspark import SparkContext

    if SparkContext._gateway is not None:
        return False
    return "extraJavaOptions" not in os.environ.get("PYSPARK_SUBMIT_ARGS", "")


def default_driver_memory() -> str | None:
    """The driver memory specan sets when it starts the driver JVM: ``2g``, unless the JVM
    is already running, the user set it (PYSPARK_SUBMIT_ARGS, SPARK_DRIVER_MEMORY,
    spark-defaults.conf) or the machine has less than twice that."""
    from pyspark import SparkContext

    if SparkContext._gateway is not None or _driver_memory_set():
        return None
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    if total < 2 * DEFAULT_DRIVER_MEMORY_GB * 1024 ** 3:
        return None
    return f"{DEFAULT_DRIVER_MEMORY_GB}g"


def _driver_memory_set() -> bool:
    """Whether the user set the driver's memory where spark-submit reads it."""
    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    if "--driver-memory" in submit_args or "spark.driver.memory" in submit_args:
        return True
    if os.environ.get("SPARK_DRIVER_MEMORY") or os.environ.get("SPARK_MEM"):
        return True
    for folder in (os.environ.get("SPARK_CONF_DIR"),
                   os.environ.get("SPARK_HOME") and os.path.join(os.environ["SPARK_HOME"], "conf")):
        defaults = Path(folder) / "spark-defaults.conf" if folder else None
        if defaults is not None and defaults.is_file():
            lines = defaults.read_text(errors="replace").splitlines()
            if any(line.split()[:1] == ["spark.driver.memory"] for line in lines):
                return True
    return False


def check_master_answers(master: str) -> None:
    """A ``spark://`` master (several, comma-separated, for standby masters) must accept a
    connection: else one line now, not Spark's minute of retries and a stopped context."""
    if not master.startswith("spark://"):
        return
    hosts = master[len("spark://"):].split(",")
    reasons = []
    for host_port in hosts:
        host, _, port = host_port.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=MASTER_CONNECT_SECONDS):
                return
        except ValueError:
            raise InputProblem(f"--spark-master {master}: expected spark://HOST:PORT") from None
        except OSError as exc:
            reasons.append(f"{host_port}: {exc.strerror or type(exc).__name__}")
    raise EnvironmentProblem(f"cannot reach the Spark master {master} ({'; '.join(reasons)}): "
                             "is it running? check --spark-master")


@dataclass
class Keeping:
    """How this run keeps the tables it computes once and reads many times."""

    # local: one JVM, so localCheckpoint's executor-local blocks cannot be lost without
    # the driver; checkpoint: reliable files under --spark-checkpoint-dir; persist:
    # cached blocks that Spark recomputes from their lineage when an executor goes away
    how: str
    kept: list = field(default_factory=list)


_KEEPING: contextvars.ContextVar[Keeping] = contextvars.ContextVar("specan_spark_keeping",
                                                                   default=Keeping("local"))


def materialize(frame):
    """Compute ``frame`` once and keep it: later queries read the result instead of
    recomputing it. With a checkpoint (local or reliable) the plan is cut to a scan of the
    result, so later queries do not re-analyse its lineage either.

    Persisted (a cluster without a checkpoint folder), the plan is cut too: the frame's
    rows as an RDD of the JVM's Rows, read back as a DataFrame over that RDD, and that
    one persisted. Its blocks are still recomputed from the RDD's lineage when an
    executor goes away, but a later query's plan stops at it. A persisted frame keeps
    its whole lineage in every plan that reads it, and the heavy views stack on each
    other: the driver re-analysed (and held) every view beneath each one it planned."""
    from pyspark import StorageLevel
    from pyspark.sql import DataFrame

    keeping = _KEEPING.get()
    if keeping.how == "local":
        kept = frame.localCheckpoint(eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK)
    elif keeping.how == "checkpoint":
        kept = frame.checkpoint(eager=True)
    else:
        spark = frame.sparkSession
        rows = frame._jdf.javaRDD()         # JVM Rows: nothing passes through Python
        cut = DataFrame(spark._jsparkSession.createDataFrame(rows, frame._jdf.schema()), spark)
        kept = cut.persist(StorageLevel.MEMORY_AND_DISK)
        kept.count()
    keeping.kept.append(kept)
    return kept


@contextlib.contextmanager
def engine_session(master: str | None = None, checkpoint_dir: str | None = None) -> Iterator:
    """The session for one run. Inside: specan's settings, shuffles sized to the cluster
    (unless the user set their number), tables kept as ``Keeping`` says. On the way out,
    whatever happened: the user's settings as they were, the run's kept tables released
    and its temporary views dropped, and a cluster failure as one line (``spark_failure``)."""
    spark = spark_session(master)
    context = spark.sparkContext
    keys = list(SESSION_SETTINGS)
    wanted = dict(SESSION_SETTINGS)
    shuffles = _shuffle_partitions(spark)
    if shuffles is not None:
        wanted[SHUFFLE_PARTITIONS] = shuffles
        keys.append(SHUFFLE_PARTITIONS)
    before = {key: _setting(spark, key) for key in keys}
    views_before = _temp_views(spark)
    rdds_before = set(_persistent_rdds(context))
    checkpoint_before = None
    if checkpoint_dir is not None:     # qualified by the caller: a local folder must reach executors as file://
        checkpoint_before = context.getCheckpointDir()
        context.setCheckpointDir(checkpoint_dir)
        how = "checkpoint"
    elif context.getCheckpointDir() is not None:     # the session's own (spark.checkpoint.dir, a notebook's)
        how = "checkpoint"
    else:
        how = "local" if context.master.startswith("local") else "persist"
    token = _KEEPING.set(Keeping(how))
    try:
        for key, value in wanted.items():
            spark.conf.set(key, value)
        yield spark
    except SpecanError:
        raise
    except Exception as exc:
        failure = spark_failure(exc)
        if failure is None:
            if getattr(exc, "java_exception", None) is None:
                raise
            raise InternalError(f"Spark failed: {spark_error_text(exc)}; run `specan --debug ...` "
                                "for the traceback and report it") from exc
        raise failure from None
    finally:
        keeping = _KEEPING.get()
        _KEEPING.reset(token)
        # each on its own: a failed release must not keep the user's settings from coming back
        # (and a stopped context has nothing left to release)
        with contextlib.suppress(Exception):
            _release(spark, keeping, views_before, rdds_before)
        with contextlib.suppress(Exception):
            for key, value in before.items():
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)
            if checkpoint_before is not None:
                context.setCheckpointDir(checkpoint_before)


def _shuffle_partitions(spark) -> str | None:
    """Shuffles in twice as many partitions as the cluster has cores, unless the user set
    ``spark.sql.shuffle.partitions`` (at launch or in the session): Spark's default of 200
    costs more in task overhead than specan's small stages take (9,800 tasks for the
    shipped sample on a one-worker cluster)."""
    if spark.sparkContext.getConf().contains(SHUFFLE_PARTITIONS):
        return None
    if _setting(spark, SHUFFLE_PARTITIONS) not in (None, SPARK_DEFAULT_SHUFFLE_PARTITIONS):
        return None
    return str(max(2, 2 * spark.sparkContext.defaultParallelism))


def _setting(spark, key: str) -> str | None:
    try:
        return spark.conf.get(key, None)
    except Exception:
        return None


def _temp_views(spark) -> set[str]:
    return {t.name for t in spark.catalog.listTables() if t.isTemporary}


def _persistent_rdds(context) -> dict:
    return dict(context._jsc.getPersistentRDDs())


def _release(spark, keeping: Keeping, views_before: set[str], rdds_before: set) -> None:
    """Drop the temporary views the run made and free the blocks it kept: a notebook's
    session is left as the run found it, and the next run on it sees none of this one's
    tables (an earlier run's view read as this run's input is how bugs start)."""
    for name in _temp_views(spark) - views_before:
        spark.catalog.dropTempView(name)
    for frame in keeping.kept:
        frame.unpersist()
    for rdd_id, rdd in _persistent_rdds(spark.sparkContext).items():
        if rdd_id not in rdds_before:
            rdd.unpersist(False)


# A cluster's failures, recognised in the text of the Java exception, each with the setting
# that changes the outcome. The text is Spark's (org.apache.spark.scheduler.TaskSetManager,
# ...deploy.client.StandaloneAppClient, java.lang.OutOfMemoryError), checked in
# tests/test_spark_failures.py against failures the tests cause on a real cluster.
_FAILURES = (
    # heartbeats unanswered: the driver too busy to answer (garbage collection in a heap too
    # small, or no CPU), or the executor too busy to send; Spark drops the executor and says
    # why after ExecutorLostFailure, so this comes first
    (re.compile(r"(?:Executor heartbeat timed out after \d+ ms|Cannot receive any reply (?:from \S+ )?in \d+ \w+)"),
     "the executors' heartbeats went unanswered ({0}): the driver (or an executor) is short of memory "
     "or CPU; raise the driver's memory (SPARK_DRIVER_MEMORY=4g) or spark.executor.memory, or run it "
     "on a less loaded machine"),
    (re.compile(r"Total size of serialized results of \d+ tasks \([^)]*\) is bigger than "
                r"spark\.driver\.maxResultSize \([^)]*\)"),
     "a result is too large for the driver ({0}): raise spark.driver.maxResultSize "
     "(--conf spark.driver.maxResultSize=4g), or run `specan load --engine spark --out DIR` "
     "to have the executors write it"),
    (re.compile(r"(?:ExecutorLostFailure|Executor lost|Lost executor|executor \S+ exited)[^\n]{0,200}"),
     "an executor was lost ({0}): give executors more memory (spark.executor.memory, "
     "spark.executor.memoryOverhead), or --spark-checkpoint-dir DIR so kept tables survive it"),
    (re.compile(r"(?:java\.lang\.OutOfMemoryError|SparkOutOfMemoryError)[^\n]{0,200}"),
     "Spark ran out of memory ({0}): raise spark.executor.memory (or the driver's: "
     "SPARK_DRIVER_MEMORY=4g), or spark.sql.shuffle.partitions so each task holds less"),
    (re.compile(r"(?:All masters are unresponsive|Master removed our application|"
                r"Cannot call methods on a stopped SparkContext|"
                r"cancelled because SparkContext was shut down)[^\n]{0,120}"),
     "the Spark application stopped ({0}): check the master (--spark-master) and its workers"),
)


def spark_failure(exc: BaseException) -> EnvironmentProblem | None:
    """One line naming the cause and the setting to change, for a failure of the cluster
    (exit 3); None for anything else, which stays an internal error."""
    text = f"{exc}\n{java_cause(exc)}"
    for pattern, message in _FAILURES:
        found = pattern.search(text)
        if found:
            quoted = " ".join(found.group(0).split())
            return EnvironmentProblem(message.format(quoted[:240]))
    return None


def java_cause(exc: BaseException) -> str:
    """The innermost Java exception behind a py4j error, as Java prints it (``class:
    message``), or ''. pyspark's own first line ("An error occurred while calling
    o29.sql.") names only the call; the cause names what went wrong."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return ""
    try:
        while java.getCause() is not None:
            java = java.getCause()
        return " ".join(str(java.toString()).split())[:300]
    except Exception:       # the JVM gone with the failure: nothing more to ask it
        return ""


def spark_error_text(exc: BaseException) -> str:
    """What a one-line message quotes of a Spark error: the Java cause when there is one."""
    return java_cause(exc) or first_line(exc)


def _on_path(program: str) -> bool:
    import shutil
    return shutil.which(program) is not None
