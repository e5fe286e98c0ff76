"""What the notebook peers share: the batch buckets and the answers they print.

Each peer (bench/duckdb_peer.py, bench/polars_peer.py, bench/pyspark_peer.py) computes
the same raw aggregates its own way; ``answers`` turns them into one document, rounded
so that the three print the same JSON on the same files (bench/scale.py compares them).
Only the small per-deployment and per-bucket rows reach this Python: the peers, like the
report, leave the rounds to their engine.
"""

from __future__ import annotations

EDGES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
LABELS = ["1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65-128", "129-256", "257-512", "513+"]


def _r(value, digits: int = 6):
    return None if value is None else round(float(value), digits)


def answers(deployments, acceptance, buckets, itl, duplicates, orphans) -> dict:
    """The peers' document.

    deployments: (deployment_id, model, method); acceptance: (deployment_id, accept length,
    [survival at position 1..γ]); buckets: (deployment_id, bucket, time_ms, committed) over
    decode steps, a round's time its step's duration / batch size; itl: (deployment_id,
    p50, p99, gaps); duplicates: rounds beyond the first of a key; orphans: (rounds without
    a request row, rounds without a step row)."""
    model = {d: m for d, m, _ in deployments}
    method = {d: x for d, _, x in deployments}
    baseline = {model[d]: d for d in model if method[d] == "none"}
    cells = {(d, b): (float(t), int(c)) for d, b, t, c in buckets}
    speedup = {}
    for dep in sorted(model):
        base = baseline.get(model[dep])
        if method[dep] == "none" or base is None:
            continue
        by_bucket, saved, spent = {}, 0.0, 0.0
        for label in LABELS:
            if (dep, label) not in cells or (base, label) not in cells:
                continue
            time_ms, committed = cells[dep, label]
            base_time, base_committed = cells[base, label]
            plain_ms = base_time / base_committed * committed     # what plain decoding would have taken
            by_bucket[label] = _r(plain_ms / time_ms)
            saved += plain_ms
            spent += time_ms
        speedup[dep] = {"all": _r(saved / spent) if spent else None, "by_bucket": by_bucket}
    return {
        "accept_length": {d: _r(a) for d, a, _ in sorted(acceptance)},
        "survival": {d: [_r(x) for x in s] for d, _, s in sorted(acceptance)},
        "speedup": speedup,
        "itl_ms": {d: {"p50": _r(p50, 3), "p99": _r(p99, 3), "n": int(n)} for d, p50, p99, n in sorted(itl)},
        "duplicate_rounds": int(duplicates),
        "orphan_rounds": {"no_request": int(orphans[0]), "no_step": int(orphans[1])},
    }
