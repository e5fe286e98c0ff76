-- Latency of each clean request, in ms, and its largest streaming gap.
-- Grain: one row per clean request (request_uid).
with stalls as (
    select request_uid, max(gap_ms) as max_stall_ms
    from itl_gaps
    group by request_uid
)

select
    q.deployment_id,
    q.request_uid,
    q.request_id,
    q.output_tokens,
    date_diff('microsecond', q.arrival_time, q.first_token_time) / 1000.0 as ttft_ms,
    date_diff('microsecond', q.arrival_time, q.finish_time) / 1000.0 as e2el_ms,
    case
        when q.output_tokens > 1
            then date_diff('microsecond', q.first_token_time, q.finish_time) / 1000.0 / (q.output_tokens - 1)
    end as tpot_ms,
    s.max_stall_ms
from requests as q
left join stalls as s on s.request_uid = q.request_uid
