-- The load curve: acceptance, round time and speedup against the matched baseline
-- per batch bucket, over decode-only rounds. condition_holds is the seed's speedup
-- condition E[T_round] < t0 · E[L], written round_ms < t0_ms · tokens_per_round.
-- Grain: one row per deployment_id, batch_bucket.
select
    d.deployment_id,
    d.batch_bucket,
    batch_bucket_min(d.batch_bucket) as bucket_min,
    d.min_batch_size,
    d.max_batch_size,
    d.num_rounds,
    1 + d.num_accepted_tokens / nullif(d.num_spec_rounds, 0) as mean_accept_length,
    d.num_committed_tokens / d.num_rounds as tokens_per_round,
    d.time_ms / d.num_rounds as round_ms,
    d.draft_ms,
    d.verify_ms,
    d.other_ms,
    t.t0_ms,
    t.t0_ms * d.num_committed_tokens / nullif(d.time_ms, 0) as speedup,
    d.time_ms / d.num_rounds < t.t0_ms * d.num_committed_tokens / d.num_rounds as condition_holds
from decode_totals as d
left join baseline_t0 as t
    on t.deployment_id = d.deployment_id
    and t.batch_bucket = d.batch_bucket
    and t.context_bucket is null
where d.grouping = 'batch'
