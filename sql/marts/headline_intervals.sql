-- 95 % interval of each deployment's mean accept length, by a Poisson bootstrap over its
-- requests (docs/metrics.md, "Intervals of the headline numbers"). Each request is in one
-- of 256 groups (request_group, the same on every engine); in each of
-- intervals_replicates() replicates every group of a deployment gets a weight drawn from
-- Poisson(1) by a hash of (deployment, replicate, group, intervals_seed()) (the macro
-- bootstrap_weight), so a run gives the same interval every time. A replicate's accept
-- length is 1 + Σ accepted* / Σ speculative rounds*, * the weighted sums; one whose
-- speculative rounds weigh nothing is dropped (accept_length_replicates counts the used
-- ones). The interval is the used replicates' 2.5 % and 97.5 % quantiles. The speedups'
-- intervals are a block jackknife over time (analyzer/analysis/uncertainty.py).
-- Grain: one row per deployment_id with rounds.
--
-- The bootstrap's cost is fixed per deployment: groups × replicates weights and, per
-- replicate, one dot product per weighted sum. Each deployment's sums are vectors in
-- group order and each replicate one row, whose weighted sums are list_dot_product of its
-- weights with them: a fixed order of addition, so every run adds alike, and no join or
-- group-by per (replicate, group). docs/performance.md has the measurements.
with replicates as (
    select unnest(range(intervals_replicates())) as replicate
),

vectors as (
    -- a deployment's sums in group order
    select
        deployment_id,
        list(request_group order by request_group) as groups,
        list(cast(num_spec_rounds as double) order by request_group) as spec_rounds,
        list(cast(num_accepted_tokens as double) order by request_group) as accepted
    from request_group_cells
    group by deployment_id
),

weighted as (
    select
        deployment_id,
        replicate,
        list_dot_product(w, spec_rounds) as spec_rounds,
        list_dot_product(w, accepted) as accepted
    from (
        select
            v.*,
            p.replicate,
            list_transform(v.groups, lambda g: bootstrap_weight(v.deployment_id, p.replicate, g, intervals_seed()))
                as w
        from vectors as v
        cross join replicates as p
    )
),

per_replicate as (
    select
        deployment_id,
        replicate,
        case when spec_rounds > 0 then 1 + accepted / spec_rounds end as accept_length
    from weighted
)

select
    deployment_id,
    intervals_replicates() as replicates,
    count(accept_length) as accept_length_replicates,
    quantile_cont(accept_length, 0.025) as mean_accept_length_lo,
    quantile_cont(accept_length, 0.975) as mean_accept_length_hi
from per_replicate
group by deployment_id
