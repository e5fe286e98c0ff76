-- The latency summaries that take one value per request: ttft, tpot and e2el over clean
-- requests (request_latency), max_stall over each request's largest gap (request_stalls):
-- count, mean and the exact quantiles (0.5, 0.9, 0.95, 0.99) by linear interpolation.
-- latency_summary adds itl from its histogram. A scale-out engine computes these next
-- to the requests and brings back a row per deployment and metric.
-- Grain: one row per deployment_id, metric that has at least one value.
with samples as (
    select deployment_id, request_uid, 'ttft' as metric, ttft_ms as value from request_latency
    union all
    select deployment_id, request_uid, 'tpot', tpot_ms from request_latency
    union all
    select deployment_id, request_uid, 'e2el', e2el_ms from request_latency
    union all
    select deployment_id, request_uid, 'max_stall', max_stall_ms from request_stalls
)

select
    deployment_id,
    metric,
    count(value) as n,
    -- a DOUBLE mean, added in the order of its values: every run adds it alike, whatever
    -- the link keys (hashed or written) and however the requests were read
    avg(value order by value) as mean,
    quantile_cont(value, [0.5, 0.9, 0.95, 0.99]) as q,
    max(value) as max
from samples
where value is not null
group by deployment_id, metric
