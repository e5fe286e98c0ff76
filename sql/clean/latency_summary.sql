-- Latency summaries per deployment and metric, computed once: ttft, tpot, e2el over
-- clean requests; itl over every streaming gap; max_stall over each request's largest gap.
-- Grain: one row per deployment_id, metric that has at least one value.
-- materialized: table
--
-- The gaps come from request_rounds (one list per request; itl_gaps without the
-- round_idx it does not need), so no pass here reads the rounds.
with stalls as (
    select deployment_id, max_stall_ms
    from request_rounds
    where packed and max_stall_ms is not null
    union all
    select deployment_id, max(gap_ms)
    from request_gaps_unpacked
    group by deployment_id, request_uid
),

samples as (
    select deployment_id, 'ttft' as metric, ttft_ms as value from request_latency
    union all
    select deployment_id, 'tpot', tpot_ms from request_latency
    union all
    select deployment_id, 'e2el', e2el_ms from request_latency
    union all
    select deployment_id, 'max_stall', max_stall_ms from stalls
    union all
    select deployment_id, 'itl', unnest(gaps_us) / 1000.0 from request_rounds where packed
    union all
    select deployment_id, 'itl', gap_ms from request_gaps_unpacked
)

select
    deployment_id,
    metric,
    count(value) as n,
    avg(value) as mean,
    quantile_cont(value, [0.5, 0.9, 0.95, 0.99]) as q,
    max(value) as max
from samples
where value is not null
group by deployment_id, metric
