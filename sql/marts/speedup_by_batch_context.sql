-- Speedup per (batch bucket, context bucket) over decode-only rounds with a clean step.
-- t0_ms is the baseline's time per token at the batch sizes and contexts the
-- deployment's steps in the cell ran at (baseline_t0: with the context term where both
-- sides' steps have context lengths, t0_match 'context', else on load alone, 'load'),
-- and speedup = Σ counterfactual / Σ time over its matched steps in the cell. A step
-- falls in the context bucket of its mean context per request (matched_units); the
-- acceptance columns count rounds by their own context_len (decode_totals).
-- context_t0_guard: why no step of the cell is matched (baseline_t0.t0_guard).
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
    t.t0_ms,
    case when t.t0_ms is not null then case when t.context_known then 'context' else 'load' end end as t0_match,
    t.t0_guard as context_t0_guard,
    t.matched_share,
    t.counterfactual_ms,
    t.matched_tokens,
    t.matched_time_ms,
    t.counterfactual_ms / nullif(cast(t.matched_time_ms as double), 0) as speedup
from decode_totals as d
left join baseline_t0 as t
    on t.deployment_id = d.deployment_id
    and t.batch_bucket = d.batch_bucket
    and t.context_bucket = d.context_bucket
where d.grouping = 'context' and d.context_bucket is not null
