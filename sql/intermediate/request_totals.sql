-- What the per-deployment marts read of the requests table, summed once: counts,
-- correctness and quality columns, failures, and the request timings tpot_speedup
-- divides. The marts read these sums, never the requests themselves, so a scale-out
-- engine brings back one row per deployment, not one per request (sql/scaleout.toml).
-- timed: output_tokens > 1 and both first_token_time and finish_time known.
-- Grain: one row per deployment_id with requests.
with flagged as (
    select
        *,
        output_tokens > 1 and first_token_time is not null and finish_time is not null as timed
    from requests
)

select
    deployment_id,
    count(*) as num_requests,
    count(matches_reference) as matches_checked,
    count(*) filter (where matches_reference) as matches_true,
    count(quality_score) as quality_n,
    count(*) filter (where finish_reason in ('error', 'abort')) as failed_requests,
    -- a DOUBLE mean, added in the order of its values: every run adds it alike, whatever
    -- the link keys (hashed or written) and however the requests were read
    avg(quality_score order by quality_score) as quality_mean,
    count(*) filter (where timed) as timed_requests,
    sum(date_diff('microsecond', first_token_time, finish_time)) filter (where timed) as timed_duration_us,
    sum(output_tokens - 1) filter (where timed) as timed_tokens,
    sum(output_tokens - 1) filter (where output_tokens > 1) as tokens_after_first,
    -- the context a request brings: the verdict compares the two sides' medians
    quantile_cont(prompt_tokens, 0.5) as prompt_tokens_median
from flagged
group by deployment_id
