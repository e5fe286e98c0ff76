-- The logs speedup's load curve: per batch bucket b of running requests, a speculative
-- deployment D's generation throughput from its engine log against what its matched
-- baseline B's log says plain decoding gives at the running-request counts D's intervals
-- ran at (matched_weights, basis logs: each interval matched at its own count, between
-- the counts B logged). tokens = Σ generation_tokens_per_s · seconds and seconds = Σ
-- seconds over D's usable log intervals (log_intervals) in b; baseline_seconds_for_tokens
-- = Σ counterfactual over its matched intervals, the seconds B would take for their
-- tokens at their loads; speedup = that ÷ their seconds. matched_share: the share of the
-- bucket's tokens in matched intervals; baseline_intervals: B's usable intervals in the
-- bucket; counted: some interval of the bucket is matched.
-- Grain: one row per (deployment_id, batch_bucket) of a speculative deployment where it
-- logged usable intervals and has a matched baseline.
with groups as (
    select
        s.deployment_id,
        s.baseline_id,
        s.batch_bucket,
        s.load,
        s.reason,
        sum(s.units) as units,
        sum(s.tokens) as tokens,
        sum(s.time_ms) as time_ms
    from matched_sums as s
    where s.basis = 'logs'
    group by all
),

costed as (
    select g.*, case when g.reason is null then cast(g.tokens as double) * w.level_ms end as counterfactual_ms
    from groups as g
    join matched_weights as w on w.basis = 'logs' and w.deployment_id = g.deployment_id and w.load = g.load
),

buckets as (
    select
        deployment_id,
        baseline_id,
        batch_bucket,
        sum(units) as num_intervals,
        cast(sum(time_ms) as double) / 1000 as seconds,
        cast(sum(tokens) as double) as generated_tokens,
        -- a DOUBLE sum in a total order of the rows (load, reason): the same in every run
        sum(counterfactual_ms order by load, reason) / 1000 as baseline_seconds_for_tokens,
        cast(sum(tokens) filter (where reason is null) as double) as matched_tokens,
        cast(sum(time_ms) filter (where reason is null) as double) / 1000 as matched_seconds
    from costed
    group by deployment_id, baseline_id, batch_bucket
),

baseline_buckets as (
    select deployment_id, batch_bucket(cell) as batch_bucket, sum(units) as intervals,
           cast(sum(time_ms) as double) / 1000 as seconds, cast(sum(tokens) as double) as tokens
    from matched_support
    where basis = 'logs'
    group by deployment_id, batch_bucket(cell)
)

select
    b.deployment_id,
    b.baseline_id,
    b.batch_bucket,
    batch_bucket_min(b.batch_bucket) as bucket_min,
    b.num_intervals,
    b.seconds,
    b.generated_tokens,
    b.generated_tokens / nullif(b.seconds, 0) as generation_tokens_per_s,
    coalesce(x.intervals, 0) as baseline_intervals,
    x.seconds as baseline_seconds,
    x.tokens / nullif(x.seconds, 0) as baseline_generation_tokens_per_s,
    b.baseline_seconds_for_tokens,
    b.baseline_seconds_for_tokens / nullif(b.matched_seconds, 0) as speedup,
    coalesce(b.matched_tokens, 0) / nullif(b.generated_tokens, 0) as matched_share,
    b.matched_tokens is not null as counted
from buckets as b
left join baseline_buckets as x on x.deployment_id = b.baseline_id and x.batch_bucket = b.batch_bucket
