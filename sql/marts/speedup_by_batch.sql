-- The load curve: acceptance, round time and speedup against the matched baseline
-- per batch bucket, over decode-only rounds. t0_ms is the baseline's time per token at
-- the batch sizes and contexts the deployment's steps in the bucket ran at
-- (baseline_t0), and speedup = Σ counterfactual / Σ time over its matched steps there,
-- the same sums as the headline speedup; matched_share: the share of the bucket's tokens
-- those steps hold. condition_holds is the seed's speedup condition
-- E[T_round] < t0 · E[L] over the matched steps (where t0 is measured), the same as
-- speedup > 1 there; round_ms and tokens_per_round are over every decode-only round.
-- Grain: one row per deployment_id, batch_bucket.
select
    d.deployment_id,
    d.batch_bucket,
    batch_bucket_min(d.batch_bucket) as bucket_min,
    d.min_batch_size,
    d.max_batch_size,
    d.num_rounds,
    1 + d.num_accepted_tokens / nullif(d.num_spec_rounds, 0) as mean_accept_length,
    d.num_committed_tokens / d.num_rounds as tokens_per_round,
    d.time_ms / d.num_rounds as round_ms,
    d.draft_ms,
    d.verify_ms,
    d.other_ms,
    t.t0_ms,
    t.counterfactual_ms / nullif(cast(t.matched_time_ms as double), 0) as speedup,
    t.matched_share,
    t.t0_guard,
    -- on the matched steps, where t0 is: E[T_round] < t0 · E[L] there is speedup > 1
    t.counterfactual_ms > cast(t.matched_time_ms as double) as condition_holds
from decode_totals as d
left join baseline_t0 as t
    on t.deployment_id = d.deployment_id
    and t.batch_bucket = d.batch_bucket
    and t.context_bucket is null
where d.grouping = 'batch'
