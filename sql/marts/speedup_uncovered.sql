-- Where a speculative deployment's decode steps ran that its speedup leaves out, and why:
-- what would have to be measured for the speedup to cover them.
-- Grain: one row per (deployment_id, batch_bucket, reason) with unmatched steps.
--
-- reason: no_baseline (the deployment has no matched baseline), no_baseline_loads (the
-- baseline has no load cell with enough steps and requests), load_gap (the baseline's
-- nearest measured loads below and above lie more than max_load_gap() apart),
-- below_baseline_loads, above_baseline_loads (beyond every load it measured) or
-- context_out_of_range (its steps held contexts outside what the baseline's steps held
-- at those loads, widened by context_margin()) (matched_weights, matched_sums).
-- committed_share: those steps' tokens as a share of all the deployment's committed
-- tokens (the denominator of speedup_coverage); min_batch_size, max_batch_size and
-- min_context, max_context (per request): the loads and contexts they ran at;
-- baseline_min_load, baseline_max_load: the loads the baseline measured (its supported
-- cells), to name in the verdict.
with committed as (
    select deployment_id, sum(num_committed_tokens) as all_committed
    from round_cells
    group by deployment_id
),

left_out as (
    select
        s.deployment_id,
        s.baseline_id,
        s.batch_bucket,
        s.reason,
        sum(s.tokens) as tokens,
        min(s.load) as min_load,
        max(s.load) as max_load,
        min(s.min_context) as min_context,
        max(s.max_context) as max_context
    from matched_sums as s
    where s.basis = 'steps' and s.reason is not null
    group by s.deployment_id, s.baseline_id, s.batch_bucket, s.reason
),

without_baseline as (
    select
        d.deployment_id,
        null as baseline_id,
        d.batch_bucket,
        'no_baseline' as reason,
        d.num_committed_tokens as tokens,
        d.min_batch_size as min_load,
        d.max_batch_size as max_load,
        null as min_context,
        null as max_context
    from decode_totals as d
    join matched_baseline as m on m.deployment_id = d.deployment_id and m.method <> 'none'
    where d.grouping = 'batch' and m.baseline_id is null
),

baseline_loads as (
    select deployment_id, min(min_load) as min_load, max(max_load) as max_load
    from matched_support
    where basis = 'steps' and supported
    group by deployment_id
)

select
    u.deployment_id,
    u.baseline_id,
    u.batch_bucket,
    batch_bucket_min(u.batch_bucket) as bucket_min,
    cast(u.tokens as double) / nullif(c.all_committed, 0) as committed_share,
    u.reason,
    cast(u.min_load as bigint) as min_batch_size,
    cast(u.max_load as bigint) as max_batch_size,
    u.min_context,
    u.max_context,
    cast(b.min_load as bigint) as baseline_min_load,
    cast(b.max_load as bigint) as baseline_max_load
from (select * from left_out union all select * from without_baseline) as u
join committed as c on c.deployment_id = u.deployment_id
left join baseline_loads as b on b.deployment_id = u.baseline_id
