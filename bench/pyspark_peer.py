"""The notebook peer in PySpark: the report's core answers, checks included, as a Spark job.

The same answers as bench/duckdb_peer.py (accept length, per-position survival, speedup
by batch bucket, exact itl p50/p99, duplicate round keys, orphan rounds), written as one
would write a PySpark job over the same Parquet files: DataFrames, one action per answer,
a window for the gaps, ``percentile`` (exact) for the quantiles. It is the comparison for
``specan report --engine spark`` (bench/scale.py --spark, --spark-cluster).

    python bench/pyspark_peer.py TRACES [--master local[*]]   # prints the answers as JSON

The session is started as specan starts its own (the driver's memory, the shuffle
partitions of a local session), so the two runs differ by the work, not the settings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from peer_answers import EDGES, LABELS, answers  # noqa: E402


def session(master: str):
    from pyspark.sql import SparkSession

    # as analyzer/spark/session.py: a driver of 2 GB unless the caller set one
    if "--driver-memory" not in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
        os.environ["PYSPARK_SUBMIT_ARGS"] = (os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
                                             .replace("pyspark-shell", "--driver-memory 2g pyspark-shell"))
    builder = SparkSession.builder.master(master).appName("specan-bench-pyspark-peer")
    builder = builder.config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    if master.startswith("local"):
        builder = builder.config("spark.sql.shuffle.partitions", str(2 * (os.cpu_count() or 1)))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(traces: str, master: str) -> None:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark = session(master)
    read = {t: spark.read.option("recursiveFileLookup", "false").parquet(f"{traces}/{t}")
            for t in ("rounds", "steps", "requests")}
    rounds, steps, requests = read["rounds"], read["steps"], read["requests"]
    deployments = spark.read.parquet(f"{traces}/deployments.parquet")

    gamma = rounds.agg(F.max("num_draft_tokens")).first()[0] or 0
    spec = rounds.where("num_draft_tokens > 0")
    survival = F.array(*[(F.count(F.when((F.col("num_accepted_tokens") >= i) & (F.col("num_draft_tokens") >= i), 1))
                          / F.count(F.when(F.col("num_draft_tokens") >= i, 1))) for i in range(1, gamma + 1)])
    acceptance = spec.groupBy("deployment_id").agg(
        (1 + F.sum("num_accepted_tokens") / F.count(F.lit(1))).alias("accept_length"), survival.alias("survival"))

    label = F.lit(LABELS[-1])
    for edge, name in reversed(list(zip(EDGES, LABELS))):
        label = F.when(F.col("batch_size") <= edge, name).otherwise(label)
    keyed = rounds.join(steps.select("deployment_id", "step_id", "start_time", "duration_ms", "batch_size",
                                     "num_prefill_tokens"), ["deployment_id", "step_id"])
    buckets = (keyed.where("num_prefill_tokens = 0").groupBy("deployment_id", label.alias("bucket"))
               .agg(F.sum(F.col("duration_ms") / F.col("batch_size")).alias("time_ms"),
                    F.sum("num_committed_tokens").alias("committed")))

    t_us = F.unix_micros(F.col("start_time")) + F.col("duration_ms") * 1000
    emissions = (keyed.where("num_committed_tokens > 0")
                 .select("deployment_id", "request_id", "round_idx", t_us.alias("t_us"))
                 .unionByName(requests.where("first_token_time is not null").select(
                     "deployment_id", "request_id", F.lit(-1).alias("round_idx"),
                     F.unix_micros("first_token_time").cast("double").alias("t_us"))))
    order = Window.partitionBy("deployment_id", "request_id").orderBy("round_idx")
    gaps = emissions.select("deployment_id", ((F.col("t_us") - F.lag("t_us").over(order)) / 1000).alias("gap_ms"))
    itl = (gaps.where("gap_ms is not null").groupBy("deployment_id")
           .agg(F.percentile("gap_ms", F.lit(0.5)).alias("p50"), F.percentile("gap_ms", F.lit(0.99)).alias("p99"),
                F.count(F.lit(1)).alias("n")))

    duplicates = (rounds.groupBy("deployment_id", "request_id", "round_idx").count().where("count > 1")
                  .agg(F.sum(F.col("count") - 1)).first()[0] or 0)
    no_request = rounds.join(requests, ["deployment_id", "request_id"], "left_anti").count()
    no_step = rounds.join(steps, ["deployment_id", "step_id"], "left_anti").count()

    doc = answers([tuple(r) for r in deployments.select("deployment_id", "model", "method").collect()],
                  [tuple(r) for r in acceptance.collect()], [tuple(r) for r in buckets.collect()],
                  [tuple(r) for r in itl.collect()], duplicates, (no_request, no_step))
    spark.stop()
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces")
    parser.add_argument("--master", default="local[*]")
    args = parser.parse_args()
    main(args.traces, args.master)
