"""The notebook peer in polars: the core metrics the way one would write them with lazy scans.

The same three metric groups as bench/pandas_peer.py: accept length per
deployment, per-position survival, and the throughput-weighted speedup by batch
bucket against the `none` baseline of the same model. Lazy scans let polars read
only the columns it needs and stream the aggregates.

    python bench/polars_peer.py TRACES
"""

import sys
from pathlib import Path

import polars as pl

EDGES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
LABELS = ["1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65-128", "129-256", "257-512", "513+"]


def bucket(batch_size: pl.Expr) -> pl.Expr:
    """The batch bucket label (docs/metrics.md): the first edge the batch size does not exceed."""
    expr = pl.lit(LABELS[-1])
    for edge, label in reversed(list(zip(EDGES, LABELS))):
        expr = pl.when(batch_size <= edge).then(pl.lit(label)).otherwise(expr)
    return expr


def main(traces: Path) -> None:
    deployments = pl.read_parquet(traces / "deployments.parquet")
    rounds = pl.scan_parquet(traces / "rounds" / "**" / "*.parquet", hive_partitioning=True)
    steps = pl.scan_parquet(traces / "steps" / "**" / "*.parquet", hive_partitioning=True)
    rounds = rounds.with_columns(pl.col("deployment_id").cast(pl.String))
    steps = steps.with_columns(pl.col("deployment_id").cast(pl.String))

    spec = rounds.filter(pl.col("num_draft_tokens") > 0)
    max_d = spec.select(pl.col("num_draft_tokens").max()).collect().item() or 0
    accept_and_positions = spec.group_by("deployment_id").agg(
        (1 + pl.col("num_accepted_tokens").sum() / pl.len()).alias("mean_accept_length"),
        *[((pl.col("num_accepted_tokens") >= i).filter(pl.col("num_draft_tokens") >= i).mean()).alias(f"survival_{i}")
          for i in range(1, max_d + 1)],
    )
    decode_steps = steps.filter(pl.col("num_prefill_tokens") == 0).select(
        "deployment_id", "step_id", "duration_ms",
        bucket(pl.col("batch_size")).alias("bucket"))
    by_bucket = (rounds.select("deployment_id", "step_id", "num_committed_tokens")
                 .join(decode_steps, on=["deployment_id", "step_id"])
                 .group_by("deployment_id", "bucket")
                 .agg(pl.col("duration_ms").sum().alias("time"), pl.col("num_committed_tokens").sum().alias("committed")))
    accept, buckets = pl.collect_all([accept_and_positions, by_bucket])

    methods = dict(zip(deployments["deployment_id"], deployments["method"]))
    baseline = {m: d for d, m in zip(deployments["deployment_id"], deployments["model"]) if methods[d] == "none"}
    t0 = {(r["deployment_id"], r["bucket"]): r["time"] / r["committed"] for r in buckets.iter_rows(named=True)}
    speedups = {}
    for dep, model in zip(deployments["deployment_id"], deployments["model"]):
        if methods[dep] == "none" or model not in baseline:
            continue
        covered = [r for r in buckets.filter(pl.col("deployment_id") == dep).iter_rows(named=True)
                   if (baseline[model], r["bucket"]) in t0]
        speedups[dep] = (sum(t0[baseline[model], r["bucket"]] * r["committed"] for r in covered)
                         / sum(r["time"] for r in covered))
    print(accept.to_dicts(), speedups)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
