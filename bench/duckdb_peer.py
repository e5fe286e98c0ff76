"""The notebook peer in DuckDB SQL: the report's core answers, checks included, as one would write them.

What an engineer who knows DuckDB writes by hand to answer what the report answers
first, over the same Parquet files (one statement per answer, no helper tables):

- accept length per speculative deployment: 1 + accepted / speculative rounds;
- per-position survival: of the rounds that drafted at least i tokens, the share that
  accepted at least i, i = 1..γ;
- the throughput-weighted speedup by batch bucket against the ``none`` baseline of the
  same model (decode steps only: time per committed token at each bucket), and overall;
- exact itl p50 and p99 per deployment: the gaps between a request's consecutive
  emissions (its first token, then the end of each round that committed tokens, in
  round_idx order), pooled over the deployment's requests (docs/metrics.md, Latency);
- the checks: rounds that repeat a (deployment, request, round_idx) key, and rounds whose
  request or step has no row (orphans).

    python bench/duckdb_peer.py TRACES          # prints the answers as JSON

bench/polars_peer.py and bench/pyspark_peer.py compute the same answers (bench/scale.py
compares them); bench/peer_answers.py holds what the three share: the buckets and the
rounding of the printed answers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_answers import EDGES, LABELS, answers  # noqa: E402


def bucket_sql(column: str) -> str:
    whens = " ".join(f"when {column} <= {edge} then '{label}'" for edge, label in zip(EDGES, LABELS))
    return f"case {whens} else '{LABELS[-1]}' end"


def main(traces: Path) -> None:
    con = duckdb.connect()
    con.execute("set TimeZone = 'UTC'")
    for table in ("rounds", "steps", "requests"):
        con.execute(f"create view {table} as select * from read_parquet('{traces}/{table}/**/*.parquet', "
                    "hive_partitioning = true, union_by_name = true)")
    con.execute(f"create view deployments as select * from read_parquet('{traces}/deployments.parquet')")

    gamma = con.execute("select coalesce(max(num_draft_tokens), 0) from rounds").fetchone()[0]
    survival = ", ".join(f"count(*) filter (where num_accepted_tokens >= {i} and num_draft_tokens >= {i}) "
                         f"/ nullif(count(*) filter (where num_draft_tokens >= {i}), 0)" for i in range(1, gamma + 1))
    acceptance = con.execute(f"""
        select deployment_id, 1 + sum(num_accepted_tokens) / count(*), [{survival}]
        from rounds where num_draft_tokens > 0 group by deployment_id""").fetchall()

    buckets = con.execute(f"""
        select r.deployment_id, {bucket_sql('s.batch_size')} as bucket,
               sum(s.duration_ms / s.batch_size) as time_ms, sum(r.num_committed_tokens) as committed
        from rounds as r join steps as s on s.deployment_id = r.deployment_id and s.step_id = r.step_id
        where s.num_prefill_tokens = 0
        group by all""").fetchall()

    itl = con.execute("""
        with emissions as (
            select r.deployment_id, r.request_id, r.round_idx,
                   epoch_us(s.start_time) + s.duration_ms * 1000 as t_us
            from rounds as r join steps as s on s.deployment_id = r.deployment_id and s.step_id = r.step_id
            where r.num_committed_tokens > 0
            union all
            select deployment_id, request_id, -1, epoch_us(first_token_time)
            from requests where first_token_time is not null
        ), gaps as (
            select deployment_id,
                   (t_us - lag(t_us) over (partition by deployment_id, request_id order by round_idx)) / 1000 as gap_ms
            from emissions
        )
        select deployment_id, quantile_cont(gap_ms, 0.5), quantile_cont(gap_ms, 0.99), count(*)
        from gaps where gap_ms is not null group by deployment_id""").fetchall()

    duplicates = con.execute("""
        select coalesce(sum(n - 1), 0) from (
            select count(*) as n from rounds group by deployment_id, request_id, round_idx having count(*) > 1)
    """).fetchone()[0]
    orphans = con.execute("""
        select
            (select count(*) from rounds as r anti join requests as q
                on q.deployment_id = r.deployment_id and q.request_id = r.request_id),
            (select count(*) from rounds as r anti join steps as s
                on s.deployment_id = r.deployment_id and s.step_id = r.step_id)""").fetchone()
    deployments = con.execute("select deployment_id, model, method from deployments").fetchall()
    print(json.dumps(answers(deployments, acceptance, buckets, itl, duplicates, orphans), indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
