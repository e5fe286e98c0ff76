-- t0: the matched baseline's decode time per token per request, by batch bucket
-- and by (batch bucket, context bucket). t0(b) = Σ baseline round time / Σ committed.
-- Grain: one row per (deployment_id, batch_bucket, context_bucket) of a speculative
-- deployment with a baseline; context_bucket is null for the batch-only t0.
select
    m.deployment_id,
    m.baseline_id,
    b.batch_bucket,
    b.context_bucket,
    b.time_ms / nullif(b.num_committed_tokens, 0) as t0_ms,
    b.num_rounds as baseline_rounds
from matched_baseline as m
join decode_totals as b
    on b.deployment_id = m.baseline_id
    and (b.grouping = 'batch' or (b.grouping = 'context' and b.context_bucket is not null))
