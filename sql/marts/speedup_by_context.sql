-- Acceptance and speedup per context-length bucket (rounds.context_len; 1k = 1024),
-- over decode-only rounds. t0 is matched on (batch bucket, context bucket) where the
-- baseline has a usable t0 there (enough steps and requests: baseline_t0), else on the
-- batch bucket alone (speedup_by_batch_context); t0_ms is the committed-weighted t0 of
-- the bucket, so speedup = t0_ms · tokens / time.
-- Grain: one row per deployment_id, context_bucket.
with cells as (
    select deployment_id, context_bucket, batch_bucket, num_rounds, num_spec_rounds, num_accepted_tokens,
           num_committed_tokens, time_ms, t0_ms
    from speedup_by_batch_context
),

buckets as (
    select
        deployment_id,
        context_bucket,
        sum(num_rounds) as num_rounds,
        sum(num_spec_rounds) as num_spec_rounds,
        sum(num_accepted_tokens) as num_accepted_tokens,
        sum(num_committed_tokens) as num_committed_tokens,
        sum(time_ms) as time_ms,
        -- only cells with a t0 count toward the speedup
        -- a DOUBLE sum, added in bucket order so that every run adds it alike
        sum(t0_ms * num_committed_tokens order by batch_bucket) as baseline_time_ms,
        sum(num_committed_tokens) filter (where t0_ms is not null) as covered_committed,
        sum(time_ms) filter (where t0_ms is not null) as covered_time_ms
    from cells
    group by deployment_id, context_bucket
)

select
    deployment_id,
    context_bucket,
    context_bucket_min(context_bucket) as bucket_min,
    num_rounds,
    1 + num_accepted_tokens / nullif(num_spec_rounds, 0) as mean_accept_length,
    num_committed_tokens / num_rounds as tokens_per_round,
    time_ms / num_rounds as round_ms,
    baseline_time_ms / nullif(covered_committed, 0) as t0_ms,
    baseline_time_ms / nullif(covered_time_ms, 0) as speedup,
    time_ms / num_rounds < baseline_time_ms / nullif(covered_committed, 0) * num_committed_tokens / num_rounds
        as condition_holds
from buckets
