-- The latency values the deployment gates decide with, counted per block of time, load
-- cell and value bin: what the bootstrap of their percentiles resamples
-- (analyzer/analysis/latency_intervals.py, docs/metrics.md "Latency against its target").
-- Grain: one row per (deployment_id, metric, time_block, cell, value_bin) with requests;
-- metric is ttft, tpot or max_stall (the latency gate's checks).
--
-- A request's block: 1 to intervals_blocks(), by arrival (equal numbers of the deployment's
-- clean requests each). Its cell: the load cell (load_cell) of the load it ran at, its mean
-- concurrency from request timings (request_loads: over its decode for tpot and
-- max_stall, over [arrival, finish] for ttft, which its wait for a first token saw); null
-- when its timings give none (no finish time). value_bin: floor(100 · ln(value in ms)),
-- bins 1 % wide, so a percentile read off the bins is within 1 % of the value; a value
-- of 0 ms or less is bin -100000.
with blocked as (
    select
        q.deployment_id,
        q.request_uid,
        ntile(intervals_blocks()) over (partition by q.deployment_id order by q.arrival_time, q.request_id, q.request_uid)
            as time_block
    from requests as q
),

samples as (
    select deployment_id, request_uid, 'ttft' as metric, ttft_ms as value from request_latency
    union all
    select deployment_id, request_uid, 'tpot', tpot_ms from request_latency
    union all
    select deployment_id, request_uid, 'max_stall', max_stall_ms from request_stalls
)

select
    s.deployment_id,
    s.metric,
    b.time_block,
    load_cell(l.load) as cell,
    case when s.value > 0 then cast(floor(100 * ln(s.value)) as bigint) else -100000 end as value_bin,
    count(*) as requests
from samples as s
join blocked as b on b.request_uid = s.request_uid
left join request_loads as l on l.request_uid = s.request_uid
where s.value is not null
group by all
