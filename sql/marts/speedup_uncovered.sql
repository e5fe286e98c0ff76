-- The decode-only batch buckets a speculative deployment ran in that its speedup leaves
-- out, and why: what would have to be measured for the speedup to cover them.
-- committed_share is the bucket's share of all the deployment's committed tokens (the
-- denominator of speedup_coverage). reason: no_baseline (the deployment has no matched
-- baseline), no_baseline_rounds (the baseline never ran decode-only rounds in the
-- bucket), or baseline_t0.t0_guard (few_baseline_steps, few_baseline_requests,
-- few_baseline_steps_and_requests, no_baseline_tokens), with the baseline's steps and
-- requests there.
-- Grain: one row per (deployment_id, batch_bucket) left out of the speedup.
with committed as (
    select deployment_id, sum(num_committed_tokens) as all_committed
    from round_cells
    group by deployment_id
)

select
    d.deployment_id,
    m.baseline_id,
    d.batch_bucket,
    batch_bucket_min(d.batch_bucket) as bucket_min,
    d.num_committed_tokens / nullif(c.all_committed, 0) as committed_share,
    case
        when m.baseline_id is null then 'no_baseline'
        when t.deployment_id is null then 'no_baseline_rounds'
        else t.t0_guard
    end as reason,
    coalesce(t.baseline_steps, 0) as baseline_steps,
    coalesce(t.baseline_requests, 0) as baseline_requests
from decode_totals as d
join matched_baseline as m on m.deployment_id = d.deployment_id and m.method <> 'none'
join committed as c on c.deployment_id = d.deployment_id
left join baseline_t0 as t
    on t.deployment_id = d.deployment_id
    and t.batch_bucket = d.batch_bucket
    and t.context_bucket is null
where d.grouping = 'batch' and t.t0_ms is null
