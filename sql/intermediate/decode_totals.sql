-- Sums over decode-only rounds (their step prefilled nothing) that have a clean
-- step, by batch bucket, and within it by context bucket or by category.
-- Grain: one row per (grouping, deployment_id, batch_bucket[, context_bucket | category]);
-- grouping is batch, context or category.
--
-- time_ms is an exact DECIMAL sum (round_cells), so sums of it are exact too.
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
    min(min_batch_size) as min_batch_size,
    max(max_batch_size) as max_batch_size,
    sum(num_rounds) as num_rounds,
    sum(num_spec_rounds) as num_spec_rounds,
    sum(num_accepted_tokens) as num_accepted_tokens,
    sum(num_committed_tokens) as num_committed_tokens,
    sum(duration_ms) as time_ms,
    sum(draft_ms) / nullif(sum(draft_n), 0) as draft_ms,
    sum(verify_ms) / nullif(sum(verify_n), 0) as verify_ms,
    sum(other_ms) / nullif(sum(other_n), 0) as other_ms
from round_cells
where has_step and decode_only
group by grouping sets (
    (deployment_id, batch_bucket),
    (deployment_id, batch_bucket, context_bucket),
    (deployment_id, batch_bucket, category)
)
