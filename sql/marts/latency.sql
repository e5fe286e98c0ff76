-- Latency percentiles per deployment, in ms: ttft, tpot, e2el and max_stall over
-- clean requests, itl over every streaming gap of every request. Percentiles are
-- linear-interpolated (quantile_cont, numpy's default).
-- Grain: one row per deployment_id, metric (ttft, tpot, itl, e2el, max_stall).
with summary as (
    select * from latency_summary
),

grid as (
    select d.deployment_id, m.metric, m.metric_order
    from deployments as d
    cross join (values ('ttft', 1), ('tpot', 2), ('itl', 3), ('e2el', 4), ('max_stall', 5)) as m(metric, metric_order)
)

select
    g.deployment_id,
    g.metric,
    g.metric_order,
    coalesce(s.n, 0) as n,
    s.mean,
    s.q[1] as p50,
    s.q[2] as p90,
    s.q[3] as p95,
    s.q[4] as p99,
    s.max
from grid as g
left join summary as s on s.deployment_id = g.deployment_id and s.metric = g.metric
