-- Acceptance and speedup per context-length bucket (rounds.context_len; 1k = 1024),
-- over decode-only rounds. The speedup adds the matched steps' counterfactual time and
-- their time over the bucket's cells (speedup_by_batch_context: each step matched at its
-- own batch size and context), so t0_ms = Σ counterfactual / Σ matched tokens and
-- speedup = Σ counterfactual / Σ matched time.
-- Grain: one row per deployment_id, context_bucket.
with cells as (
    select deployment_id, context_bucket, batch_bucket, num_rounds, num_spec_rounds, num_accepted_tokens,
           num_committed_tokens, time_ms, t0_ms,
           counterfactual_ms, matched_tokens, matched_time_ms
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
        -- the matched steps' counterfactual time and their time (baseline_t0)
        -- a DOUBLE sum, added in bucket order so that every run adds it alike
        sum(counterfactual_ms order by batch_bucket) as baseline_time_ms,
        sum(matched_tokens) as covered_committed,
        sum(matched_time_ms) as covered_time_ms
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
    baseline_time_ms / nullif(cast(covered_committed as double), 0) as t0_ms,
    baseline_time_ms / nullif(cast(covered_time_ms as double), 0) as speedup,
    -- on the matched steps: E[T_round] < t0 · E[L] there is speedup > 1
    baseline_time_ms > cast(covered_time_ms as double) as condition_holds
from buckets
