-- The logs speedup's load curve: per batch bucket b of running requests, a speculative
-- deployment D's generation throughput from its engine log against its matched baseline
-- B's at the same bucket. tokens(b) = Σ generation_tokens_per_s · seconds and
-- seconds(b) = Σ seconds over the usable log intervals (log_intervals) in b, for each;
-- baseline_seconds_for_tokens = tokens_D(b) / (tokens_B(b) / seconds_B(b)), the time B
-- would take for D's tokens there; speedup = that ÷ seconds_D(b). counted: the bucket
-- enters log_speedup, where D and B each logged at least min_log_intervals() usable
-- intervals in it and B generated tokens.
-- Grain: one row per (deployment_id, batch_bucket) of a speculative deployment where it
-- logged usable intervals.
with cells as (
    select
        deployment_id,
        batch_bucket,
        sum(num_intervals) as num_intervals,
        sum(duration_us) as duration_us,
        sum(token_us) as token_us
    from log_interval_cells
    group by deployment_id, batch_bucket
),

speculative as (
    select d.deployment_id, m.baseline_id
    from deployments as d
    left join matched_baseline as m on m.deployment_id = d.deployment_id
    where d.method <> 'none'
),

paired as (
    select
        s.deployment_id,
        s.baseline_id,
        c.batch_bucket,
        c.num_intervals,
        c.duration_us / 1e6 as seconds,
        cast(c.token_us as double) / 1e6 as generated_tokens,
        b.num_intervals as baseline_intervals,
        b.duration_us / 1e6 as baseline_seconds,
        cast(b.token_us as double) / 1e6 as baseline_tokens
    from speculative as s
    join cells as c on c.deployment_id = s.deployment_id
    left join cells as b on b.deployment_id = s.baseline_id and b.batch_bucket = c.batch_bucket
)

select
    deployment_id,
    baseline_id,
    batch_bucket,
    batch_bucket_min(batch_bucket) as bucket_min,
    num_intervals,
    seconds,
    generated_tokens,
    generated_tokens / seconds as generation_tokens_per_s,
    coalesce(baseline_intervals, 0) as baseline_intervals,
    baseline_seconds,
    baseline_tokens / baseline_seconds as baseline_generation_tokens_per_s,
    generated_tokens / nullif(baseline_tokens / baseline_seconds, 0) as baseline_seconds_for_tokens,
    generated_tokens / nullif(baseline_tokens / baseline_seconds, 0) / seconds as speedup,
    coalesce(num_intervals >= min_log_intervals() and baseline_intervals >= min_log_intervals()
             and baseline_tokens > 0, false) as counted
from paired
