-- The request timings tpot_speedup counts, summed per group of requests, for the
-- bootstrap of headline_intervals: the same 256 groups as request_group_cells
-- (request_group of the request's key), so a replicate weighs a request's rounds and its
-- timings alike. A scale-out engine brings back these sums, not the requests.
-- Grain: one row per (deployment_id, request_group) with a request that has
-- output_tokens > 1, first_token_time and finish_time.
select
    deployment_id,
    request_group(deployment_id, request_id, epoch_us(arrival_time)) as request_group,
    sum(date_diff('microsecond', first_token_time, finish_time)) as duration_us,
    sum(output_tokens - 1) as tokens
from requests
where output_tokens > 1 and first_token_time is not null and finish_time is not null
group by deployment_id, request_group(deployment_id, request_id, epoch_us(arrival_time))
