-- t0: the matched baseline's decode time per token per request, by batch bucket
-- and by (batch bucket, context bucket). t0(b) = Σ baseline round time / Σ committed.
-- Grain: one row per (deployment_id, batch_bucket, context_bucket) of a speculative
-- deployment with a baseline where the baseline ran decode-only rounds; context_bucket
-- is null for the batch-only t0.
--
-- The guard: a t0 resting on fewer than min_baseline_steps() decode-only steps or
-- min_baseline_requests() requests of the baseline there (bucket_evidence; the gates
-- TOML's [evidence] floors) is no usable t0: t0_ms is null and t0_guard says why, so
-- every view that weighs a bucket by its t0 (the speedup and its interval, coverage,
-- the load and context curves, the recommendation) leaves the bucket out the same way.
-- measured_t0_ms keeps the ratio the few steps gave, for display.
with measured as (
    select
        m.deployment_id,
        m.baseline_id,
        b.batch_bucket,
        b.context_bucket,
        b.time_ms / nullif(b.num_committed_tokens, 0) as measured_t0_ms,
        b.num_rounds as baseline_rounds,
        coalesce(e.num_steps, 0) as baseline_steps,
        coalesce(e.num_requests, 0) as baseline_requests
    from matched_baseline as m
    join decode_totals as b
        on b.deployment_id = m.baseline_id
        and (b.grouping = 'batch' or (b.grouping = 'context' and b.context_bucket is not null))
    left join bucket_evidence as e
        on e.deployment_id = m.baseline_id
        and e.batch_bucket = b.batch_bucket
        and e.context_bucket is not distinct from b.context_bucket
),

guarded as (
    select
        *,
        case
            when baseline_steps < min_baseline_steps() and baseline_requests < min_baseline_requests()
                then 'few_baseline_steps_and_requests'
            when baseline_steps < min_baseline_steps() then 'few_baseline_steps'
            when baseline_requests < min_baseline_requests() then 'few_baseline_requests'
            when measured_t0_ms is null then 'no_baseline_tokens'
        end as t0_guard
    from measured
)

select
    deployment_id,
    baseline_id,
    batch_bucket,
    context_bucket,
    case when t0_guard is null then measured_t0_ms end as t0_ms,
    measured_t0_ms,
    t0_guard,
    baseline_rounds,
    baseline_steps,
    baseline_requests
from guarded
