-- Speedup per task category: Σ_b t0(b) · committed(b, category) / Σ_b time(b, category)
-- over decode-only rounds. t0(b) is the deployment's matched t0 in bucket b
-- (baseline_t0: the baseline's time per token at the batch sizes and contexts its steps
-- there ran at): batch size and context, not category, set the cost of a step. A
-- bucket's t0 stands for all of the category's rounds there, matched steps or not, so
-- where a bucket is partly matched (baseline_t0.matched_share < 1) this is an
-- approximation.
-- Grain: one row per deployment_id, category (with decode-only rounds that have a step).
select
    d.deployment_id,
    d.category,
    -- a DOUBLE sum, added in bucket order so that every run adds it alike
    sum(t.t0_ms * d.num_committed_tokens order by d.batch_bucket)
        / nullif(sum(d.time_ms) filter (where t.t0_ms is not null), 0) as speedup,
    sum(d.num_committed_tokens) filter (where t.t0_ms is not null) / sum(d.num_committed_tokens)
        as speedup_coverage
from decode_totals as d
left join baseline_t0 as t
    on t.deployment_id = d.deployment_id
    and t.batch_bucket = d.batch_bucket
    and t.context_bucket is null
where d.grouping = 'category'
group by d.deployment_id, d.category
