-- The engine-log intervals the logs speedup reads (vllm_log, sglang_log): one engine's
-- generation throughput averaged over one logging window, the window's length, and the
-- requests running when it ended. An interval is usable with a start before its end, a
-- throughput and a running count above 0; otherwise left_out says why, in that order:
-- 'no start' (the first line of a series, or a window the engine's log leaves unknown),
-- 'no throughput', 'no running count', 'idle' (0 running: its tokens ran at a load the
-- line does not show). token_us = tokens/s × µs is an exact DECIMAL, so every sum of it
-- is the same whatever order the rows are added in.
-- Grain: one row per intervals row of source vllm_log or sglang_log.
select
    deployment_id,
    series,
    end_time,
    running_requests,
    batch_bucket(running_requests) as batch_bucket,
    generation_tokens_per_s,
    epoch_us(end_time) - epoch_us(start_time) as duration_us,
    cast(generation_tokens_per_s as decimal(18, 3)) * (epoch_us(end_time) - epoch_us(start_time)) as token_us,
    -- 64 random subsets of the intervals, which the bootstrap resamples: md5 of the key,
    -- the same on every engine (a scale-out engine groups them next to the files)
    md5_prefix(deployment_id || '/' || coalesce(series, '') || '/' || cast(epoch_us(end_time) as varchar)) % 64
        as interval_group,
    case
        when start_time is null or end_time <= start_time then 'no start'
        when generation_tokens_per_s is null then 'no throughput'
        when running_requests is null then 'no running count'
        when running_requests = 0 then 'idle'
    end as left_out
from intervals
where source in ('vllm_log', 'sglang_log')
