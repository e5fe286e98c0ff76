-- Sums over decode-only rounds (their step prefilled nothing) that have a clean
-- step, by batch bucket, and within it by context bucket or by category.
-- Grain: one row per (grouping, deployment_id, batch_bucket[, context_bucket | category]);
-- grouping is batch, context or category.
-- materialized: table
select
    case
        when grouping(context_bucket, category) = 3 then 'batch'
        when grouping(context_bucket) = 0 then 'context'
        else 'category'
    end as grouping,
    deployment_id,
    batch_bucket,
    context_bucket,
    category,
    min(batch_size) as min_batch_size,
    max(batch_size) as max_batch_size,
    count(*) as num_rounds,
    count(*) filter (where num_draft_tokens > 0) as num_spec_rounds,
    sum(num_accepted_tokens) as num_accepted_tokens,
    sum(num_committed_tokens) as num_committed_tokens,
    sum(duration_ms) as time_ms,
    avg(draft_ms) as draft_ms,
    avg(verify_ms) as verify_ms,
    avg(other_ms) as other_ms
from round_facts
where has_step and decode_only
group by grouping sets (
    (deployment_id, batch_bucket),
    (deployment_id, batch_bucket, context_bucket),
    (deployment_id, batch_bucket, category)
)
