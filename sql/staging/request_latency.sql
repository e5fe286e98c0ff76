-- Latency of each clean request, in ms.
-- Grain: one row per clean request (request_uid).
-- partition: the request's partition values (request_partitions), which tell requests of
-- one id apart; null when requests is not partitioned.
select
    q.deployment_id,
    q.request_uid,
    q.request_id,
    p.partition,
    q.output_tokens,
    date_diff('microsecond', q.arrival_time, q.first_token_time) / 1000.0 as ttft_ms,
    date_diff('microsecond', q.arrival_time, q.finish_time) / 1000.0 as e2el_ms,
    case
        when q.output_tokens > 1
            then date_diff('microsecond', q.first_token_time, q.finish_time) / 1000.0 / (q.output_tokens - 1)
    end as tpot_ms
from requests as q
left join request_partitions as p on p.request_uid = q.request_uid
