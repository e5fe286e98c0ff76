-- The speedup of each speculative deployment against its matched baseline at the load
-- (and, for steps, the context) each of its units ran at, per basis (docs/metrics.md,
-- "Speedup at the load and context each step ran at"):
--     speedup = Σ counterfactual / Σ time over its matched units,
-- counterfactual = tokens · t0(load, context), the time plain decoding would have needed
-- for the unit's tokens (matched_weights). coverage = the matched units' tokens / all of
-- its tokens of the basis (for steps, all its committed tokens: rounds in prefill steps or
-- without a step count in the denominator only; for iterations, all its steps' committed
-- tokens, prefill steps' included; for requests, Σ (output_tokens − 1) over
-- requests with more than one; for logs, its usable intervals' tokens).
-- Grain: one row per (basis, deployment_id) of a speculative deployment with a matched
-- baseline and units of the basis.
with groups as (
    select
        s.basis,
        s.deployment_id,
        s.baseline_id,
        s.load,
        s.reason,
        sum(s.units) as units,
        sum(s.tokens) as tokens,
        sum(s.time_ms) as time_ms,
        sum(s.tx) as tx
    from matched_sums as s
    group by s.basis, s.deployment_id, s.baseline_id, s.load, s.reason
),

matched as (
    select
        g.basis,
        g.deployment_id,
        g.baseline_id,
        -- doubles from exact sums, added in load order: the same in every run
        sum(cast(g.tokens as double) * w.level_ms + w.kappa * coalesce(cast(g.tx as double), 0) order by g.load)
            as counterfactual_ms,
        sum(g.time_ms) as time_ms,
        sum(g.tokens) as tokens,
        sum(g.units) as units
    from groups as g
    join matched_weights as w on w.basis = g.basis and w.deployment_id = g.deployment_id and w.load = g.load
    where g.reason is null
    group by g.basis, g.deployment_id, g.baseline_id
),

totals as (
    select basis, deployment_id, baseline_id, sum(tokens) as tokens, sum(units) as units,
           min(load) as min_load, max(load) as max_load
    from groups
    group by basis, deployment_id, baseline_id
),

all_tokens as (
    -- the coverage's denominator per basis
    select 'steps' as basis, deployment_id, cast(sum(num_committed_tokens) as decimal(38, 6)) as tokens
    from round_cells
    group by deployment_id
    union all
    select 'iterations', deployment_id, cast(committed_tokens as decimal(38, 6)) from iteration_totals
    union all
    select 'requests', deployment_id, cast(tokens_after_first as decimal(38, 6)) from request_totals
    union all
    select basis, deployment_id, tokens from totals where basis = 'logs'
),

baseline_loads as (
    -- the loads the baseline measured: its supported cells only, as speedup_uncovered names
    -- them (a cell below the [evidence] floors is no measurement the speedup could match)
    select basis, deployment_id, min(min_load) filter (where supported) as min_load,
           max(max_load) filter (where supported) as max_load,
           count(*) filter (where supported) as supported_cells
    from matched_support
    group by basis, deployment_id
)

select
    t.basis,
    t.deployment_id,
    t.baseline_id,
    m.counterfactual_ms / nullif(cast(m.time_ms as double), 0) as speedup,
    cast(coalesce(m.tokens, 0) as double) / nullif(cast(a.tokens as double), 0) as coverage,
    coalesce(m.units, 0) as matched_units,
    t.units,
    m.counterfactual_ms,
    m.time_ms,
    coalesce(m.tokens, 0) as matched_tokens,
    a.tokens as all_tokens,
    t.min_load,
    t.max_load,
    b.min_load as baseline_min_load,
    b.max_load as baseline_max_load,
    coalesce(b.supported_cells, 0) as baseline_supported_cells
from totals as t
left join matched as m on m.basis = t.basis and m.deployment_id = t.deployment_id
left join all_tokens as a on a.basis = t.basis and a.deployment_id = t.deployment_id
left join baseline_loads as b on b.basis = t.basis and b.deployment_id = t.baseline_id
