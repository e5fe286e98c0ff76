-- Speedup per (batch bucket, context bucket) over decode-only rounds with a clean step.
-- t0 is matched on both buckets where the baseline has a usable t0 there, else on the
-- batch bucket alone (t0_match says which), so speedup = t0_ms · committed / time.
-- context_t0_guard says why a cell the baseline ran in fell back: its (batch, context)
-- t0 rests on fewer steps or requests than the [evidence] floors (baseline_t0.t0_guard),
-- with context_baseline_steps and context_baseline_requests; null where it did not fall
-- back or the baseline never ran there.
-- Grain: one row per deployment_id, batch_bucket, context_bucket (rounds with a context_len).
select
    d.deployment_id,
    d.batch_bucket,
    batch_bucket_min(d.batch_bucket) as bucket_min,
    d.context_bucket,
    context_bucket_min(d.context_bucket) as context_min,
    d.num_rounds,
    d.num_spec_rounds,
    d.num_accepted_tokens,
    d.num_committed_tokens,
    d.time_ms,
    coalesce(tc.t0_ms, tb.t0_ms) as t0_ms,
    case when tc.t0_ms is not null then 'context' when tb.t0_ms is not null then 'batch' end as t0_match,
    tc.t0_guard as context_t0_guard,
    tc.baseline_steps as context_baseline_steps,
    tc.baseline_requests as context_baseline_requests,
    coalesce(tc.t0_ms, tb.t0_ms) * d.num_committed_tokens / nullif(d.time_ms, 0) as speedup
from decode_totals as d
left join baseline_t0 as tc
    on tc.deployment_id = d.deployment_id
    and tc.batch_bucket = d.batch_bucket
    and tc.context_bucket = d.context_bucket
left join baseline_t0 as tb
    on tb.deployment_id = d.deployment_id
    and tb.batch_bucket = d.batch_bucket
    and tb.context_bucket is null
where d.grouping = 'context' and d.context_bucket is not null
