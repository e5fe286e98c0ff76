"""The notebook peer: the core metrics the way one would write them in pandas.

Accept length per deployment, per-position survival, and the throughput-weighted
speedup by batch bucket against the `none` baseline of the same model. It reads
every column it needs into memory, as a notebook would.

    python bench/pandas_peer.py TRACES
"""

import sys
from pathlib import Path

import numpy as np
import pandas as pd

BUCKETS = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, np.inf]
LABELS = ["1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65-128", "129-256", "257-512", "513+"]


def main(traces: Path) -> None:
    deployments = pd.read_parquet(traces / "deployments.parquet")
    rounds = pd.read_parquet(traces / "rounds")
    steps = pd.read_parquet(traces / "steps")
    for frame in (rounds, steps):
        frame["deployment_id"] = frame["deployment_id"].astype(str)
    spec = rounds[rounds.num_draft_tokens > 0]
    accept = 1 + spec.groupby("deployment_id").num_accepted_tokens.sum() / spec.groupby("deployment_id").size()
    positions = {}
    for i in range(1, int(rounds.num_draft_tokens.max()) + 1):
        drafted = rounds[rounds.num_draft_tokens >= i]
        positions[i] = (drafted.num_accepted_tokens >= i).groupby(drafted.deployment_id).mean()
    merged = rounds.merge(steps, on=["deployment_id", "step_id"], how="inner")
    merged = merged[merged.get("num_prefill_tokens", 0) == 0]
    merged["bucket"] = pd.cut(merged.batch_size, BUCKETS, labels=LABELS)
    by_bucket = merged.groupby(["deployment_id", "bucket"], observed=True).agg(
        time=("duration_ms", "sum"), committed=("num_committed_tokens", "sum")).reset_index()
    methods = deployments.set_index("deployment_id").method
    baseline = {m: d for d, m in zip(deployments.deployment_id, deployments.model) if methods[d] == "none"}
    speedups = {}
    for dep, model in zip(deployments.deployment_id, deployments.model):
        if methods[dep] == "none":
            continue
        mine = by_bucket[by_bucket.deployment_id == dep]
        base = by_bucket[by_bucket.deployment_id == baseline[model]].set_index("bucket")
        t0 = (base.time / base.committed).reindex(mine.bucket).to_numpy()
        covered = ~np.isnan(t0)
        speedups[dep] = (t0[covered] * mine.committed.to_numpy()[covered]).sum() / mine.time.to_numpy()[covered].sum()
    print(accept.to_dict(), {i: p.to_dict() for i, p in positions.items()}, speedups)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
