"""The notebook peer in polars: the report's core answers, checks included, with lazy scans.

The same answers as bench/duckdb_peer.py (accept length, per-position survival, speedup
by batch bucket, exact itl p50/p99, duplicate round keys, orphan rounds), the way one
would write them in polars: lazy scans, so polars reads only the columns it needs, and
one ``collect_all`` so the plans share their scans where polars can.

    python bench/polars_peer.py TRACES          # prints the answers as JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_answers import EDGES, LABELS, answers  # noqa: E402


def bucket(batch_size: pl.Expr) -> pl.Expr:
    """The batch bucket label (docs/metrics.md): the first edge the batch size does not exceed."""
    expr = pl.lit(LABELS[-1])
    for edge, label in reversed(list(zip(EDGES, LABELS))):
        expr = pl.when(batch_size <= edge).then(pl.lit(label)).otherwise(expr)
    return expr


def scan(traces: Path, table: str) -> pl.LazyFrame:
    frame = pl.scan_parquet(traces / table / "**" / "*.parquet", hive_partitioning=True)
    # the keys as text: the rounds' files may store them dictionary-encoded (Categorical), the parents' not
    keys = [c for c in ("deployment_id", "request_id") if c in frame.collect_schema()]
    return frame.with_columns(pl.col(keys).cast(pl.String))


def main(traces: Path) -> None:
    deployments = pl.read_parquet(traces / "deployments.parquet")
    rounds, steps, requests = (scan(traces, t) for t in ("rounds", "steps", "requests"))

    gamma = rounds.select(pl.col("num_draft_tokens").max()).collect().item() or 0
    acceptance = rounds.filter(pl.col("num_draft_tokens") > 0).group_by("deployment_id").agg(
        (1 + pl.col("num_accepted_tokens").sum() / pl.len()).alias("accept_length"),
        pl.concat_list([(pl.col("num_accepted_tokens") >= i).filter(pl.col("num_draft_tokens") >= i).mean()
                        for i in range(1, gamma + 1)]).alias("survival"))

    keyed = rounds.join(steps.select("deployment_id", "step_id", "start_time", "duration_ms", "batch_size",
                                     "num_prefill_tokens"), on=["deployment_id", "step_id"])
    buckets = (keyed.filter(pl.col("num_prefill_tokens") == 0)
               .group_by("deployment_id", bucket(pl.col("batch_size")).alias("bucket"))
               .agg((pl.col("duration_ms") / pl.col("batch_size")).sum().alias("time_ms"),
                    pl.col("num_committed_tokens").sum().alias("committed")))

    emissions = pl.concat([
        keyed.filter(pl.col("num_committed_tokens") > 0).select(
            "deployment_id", "request_id", "round_idx",
            (pl.col("start_time").dt.epoch("us") + pl.col("duration_ms") * 1000).alias("t_us")),
        requests.filter(pl.col("first_token_time").is_not_null()).select(
            "deployment_id", "request_id", pl.lit(-1, pl.Int32).alias("round_idx"),
            pl.col("first_token_time").dt.epoch("us").cast(pl.Float64).alias("t_us")),
    ])
    itl = (emissions.sort("deployment_id", "request_id", "round_idx")
           .with_columns(((pl.col("t_us") - pl.col("t_us").shift(1).over("deployment_id", "request_id"))
                          / 1000).alias("gap_ms"))
           .drop_nulls("gap_ms")
           .group_by("deployment_id")
           .agg(pl.col("gap_ms").quantile(0.5, "linear").alias("p50"),
                pl.col("gap_ms").quantile(0.99, "linear").alias("p99"), pl.len().alias("n")))

    duplicates = (rounds.group_by("deployment_id", "request_id", "round_idx").agg(pl.len().alias("n"))
                  .filter(pl.col("n") > 1).select((pl.col("n") - 1).sum()))
    no_request = rounds.join(requests, on=["deployment_id", "request_id"], how="anti").select(pl.len())
    no_step = rounds.join(steps, on=["deployment_id", "step_id"], how="anti").select(pl.len())

    acceptance, buckets, itl, duplicates, no_request, no_step = pl.collect_all(
        [acceptance, buckets, itl, duplicates, no_request, no_step])
    print(json.dumps(answers(
        deployments.select("deployment_id", "model", "method").rows(),
        acceptance.rows(), buckets.rows(), itl.rows(), duplicates.item() or 0,
        (no_request.item(), no_step.item())), indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
