-- Latency of each clean request, in ms.
-- Grain: one row per clean request (request_uid).
select
    deployment_id,
    request_uid,
    request_id,
    output_tokens,
    date_diff('microsecond', arrival_time, first_token_time) / 1000.0 as ttft_ms,
    date_diff('microsecond', arrival_time, finish_time) / 1000.0 as e2el_ms,
    case
        when output_tokens > 1
            then date_diff('microsecond', first_token_time, finish_time) / 1000.0 / (output_tokens - 1)
    end as tpot_ms
from requests
