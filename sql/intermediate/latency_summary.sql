-- Latency summaries per deployment and metric, computed once: ttft, tpot, e2el and
-- max_stall from request_latency_summary; itl over every streaming gap.
-- Grain: one row per deployment_id, metric that has at least one value.
--
-- The gaps come from request_rounds (one list per request), so no pass here
-- reads the rounds. itl, one value per emitted chunk, is summarised from its
-- exact histogram (itl_histogram): quantile_cont's linear interpolation between
-- the order statistics at floor and ceil of (n - 1)·p, found by cumulative
-- counts, so the quantiles need no memory per gap.
with itl_ranked as (
    select
        deployment_id,
        gap_us,
        sum(n) over (partition by deployment_id order by gap_us) - n as first_rank,
        sum(n) over (partition by deployment_id order by gap_us) as end_rank,
        sum(n) over (partition by deployment_id) as total
    from itl_histogram
),

itl_positions as (
    select
        p.deployment_id,
        p.i,
        p.h,
        lo.gap_us as lo_us,
        hi.gap_us as hi_us
    from (
        select distinct deployment_id, total, i, (total - 1) * [0.5, 0.9, 0.95, 0.99][i] as h
        from itl_ranked, range(1, 5) as r(i)
    ) as p
    join itl_ranked as lo
        on lo.deployment_id = p.deployment_id and floor(p.h) >= lo.first_rank and floor(p.h) < lo.end_rank
    join itl_ranked as hi
        on hi.deployment_id = p.deployment_id and ceil(p.h) >= hi.first_rank and ceil(p.h) < hi.end_rank
),

itl as (
    select
        h.deployment_id,
        'itl' as metric,
        sum(h.n) as n,
        sum(cast(h.gap_us as hugeint) * h.n) / sum(h.n) / 1000.0 as mean,
        (select list(p.lo_us / 1000.0 + (p.h - floor(p.h)) * (p.hi_us / 1000.0 - p.lo_us / 1000.0) order by p.i)
         from itl_positions as p where p.deployment_id = h.deployment_id) as q,
        max(h.gap_us) / 1000.0 as max
    from itl_histogram as h
    group by h.deployment_id
)

select deployment_id, metric, n, mean, q, max
from request_latency_summary
union all
select deployment_id, metric, n, mean, q, max
from itl
