-- t0 by bucket: the matched baseline's time per token at the loads and contexts a
-- speculative deployment's decode steps ran at in each batch bucket, and in each (batch
-- bucket, context bucket) (docs/metrics.md, "Speedup at the load and context each step
-- ran at"). It is not the baseline's own mean over the bucket: each of the deployment's
-- steps gets its counterfactual time at its own batch size and context
-- (matched_weights), and t0_ms = Σ counterfactual / Σ tokens over its matched steps there,
-- so the per-bucket tables and the headline speedup add the same numbers.
-- Grain: one row per (deployment_id, batch_bucket, context_bucket) of a speculative
-- deployment with a matched baseline where it ran decode-only steps; context_bucket is
-- null for the batch bucket over every context.
--
-- matched_share: the share of its tokens there that are matched; t0_guard: why none is,
-- the reason of most of its tokens there (matched_sums: no_baseline_loads, load_gap,
-- below_baseline_loads, above_baseline_loads, context_out_of_range); null when some are.
-- context_known: the context term is in (both sides' steps have context_len).
with groups as (
    select
        s.deployment_id,
        s.baseline_id,
        s.batch_bucket,
        s.context_bucket,
        s.load,
        s.reason,
        sum(s.tokens) as tokens,
        sum(s.time_ms) as time_ms,
        sum(s.tx) as tx
    from matched_sums as s
    where s.basis = 'steps'
    group by all
),

costed as (
    select
        g.*,
        case when g.reason is null
            then cast(g.tokens as double) * w.level_ms + w.kappa * coalesce(cast(g.tx as double), 0)
        end as counterfactual_ms,
        w.context_known
    from groups as g
    join matched_weights as w on w.basis = 'steps' and w.deployment_id = g.deployment_id and w.load = g.load
),

cells as (
    select
        deployment_id,
        baseline_id,
        batch_bucket,
        context_bucket,
        grouping(context_bucket) = 1 as over_contexts,
        -- a DOUBLE sum in a total order of the group's rows (load, context bucket, reason):
        -- the same in every run; the cells over every context add several context buckets
        -- at one load, so load alone leaves their order to the threads
        sum(counterfactual_ms order by load, context_bucket, reason) as counterfactual_ms,
        sum(tokens) filter (where reason is null) as matched_tokens,
        sum(time_ms) filter (where reason is null) as matched_time_ms,
        sum(tokens) as tokens,
        bool_and(context_known) as context_known
    from costed
    group by grouping sets ((deployment_id, baseline_id, batch_bucket), (deployment_id, baseline_id, batch_bucket, context_bucket))
),

reasons as (
    select deployment_id, batch_bucket, context_bucket, over_contexts,
           arg_max(reason, tokens) as reason
    from (
        select deployment_id, batch_bucket, null as context_bucket, true as over_contexts, reason, sum(tokens) as tokens
        from costed where reason is not null group by deployment_id, batch_bucket, reason
        union all
        select deployment_id, batch_bucket, context_bucket, false, reason, sum(tokens)
        from costed where reason is not null group by deployment_id, batch_bucket, context_bucket, reason
    )
    group by deployment_id, batch_bucket, context_bucket, over_contexts
)

select
    c.deployment_id,
    c.baseline_id,
    c.batch_bucket,
    case when c.over_contexts then null else c.context_bucket end as context_bucket,
    c.counterfactual_ms / nullif(cast(c.matched_tokens as double), 0) as t0_ms,
    c.counterfactual_ms,
    coalesce(c.matched_tokens, 0) as matched_tokens,
    coalesce(c.matched_time_ms, 0) as matched_time_ms,
    c.tokens,
    cast(coalesce(c.matched_tokens, 0) as double) / nullif(cast(c.tokens as double), 0) as matched_share,
    case when c.matched_tokens is null then r.reason end as t0_guard,
    c.context_known
from cells as c
left join reasons as r
    on r.deployment_id = c.deployment_id
    and r.batch_bucket = c.batch_bucket
    and r.over_contexts = c.over_contexts
    and r.context_bucket is not distinct from (case when c.over_contexts then null else c.context_bucket end)
where c.over_contexts or c.context_bucket is not null
