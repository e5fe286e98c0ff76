-- Speedup from engine logs alone (basis: logs), for a speculative deployment D against
-- its matched baseline B:
--   log_speedup = Σ_b baseline_seconds_for_tokens(b) / Σ_b seconds_D(b)
-- over the counted batch buckets of log_speedup_by_batch: the time B would take for D's
-- generated tokens at D's own loads, divided by the time D took. log_speedup_coverage is
-- the share of D's usable log tokens in those buckets. The counts say what it rests on
-- and what was left out (log_intervals.left_out); log_speedup_note says why there is no
-- number, naming the import that would give one.
-- Grain: one row per speculative deployment_id with engine-log intervals.
with speculative as (
    select d.deployment_id, m.baseline_id, m.baseline_note
    from deployments as d
    left join matched_baseline as m on m.deployment_id = d.deployment_id
    where d.method <> 'none' and d.deployment_id in (select deployment_id from log_interval_counts)
),

covered as (
    select
        deployment_id,
        -- a DOUBLE sum, added in bucket order so that every run adds it alike
        sum(baseline_seconds_for_tokens order by bucket_min) as baseline_seconds,
        sum(seconds) as seconds,
        sum(generated_tokens) as generated_tokens,
        count(*) as counted_buckets,
        sum(num_intervals) as counted_intervals,
        sum(baseline_intervals) as baseline_counted_intervals
    from log_speedup_by_batch
    where counted
    group by deployment_id
),

shared as (
    -- buckets both logged, counted or not, for the note
    select deployment_id, count(*) as shared_buckets, max(least(num_intervals, baseline_intervals)) as most_of_both
    from log_speedup_by_batch
    where baseline_intervals > 0
    group by deployment_id
)

select
    s.deployment_id,
    s.baseline_id,
    c.baseline_seconds / nullif(c.seconds, 0) as log_speedup,
    case when s.baseline_id is not null then coalesce(c.generated_tokens, 0) / nullif(i.usable_tokens, 0) end
        as log_speedup_coverage,
    coalesce(c.counted_buckets, 0) as counted_buckets,
    coalesce(c.counted_intervals, 0) as counted_intervals,
    coalesce(c.baseline_counted_intervals, 0) as baseline_counted_intervals,
    i.log_intervals,
    i.usable_intervals,
    i.intervals_without_start,
    i.intervals_without_throughput,
    i.intervals_without_running,
    i.idle_intervals,
    coalesce(b.usable_intervals, 0) as baseline_usable_intervals,
    case
        when c.deployment_id is not null then null
        when s.baseline_id is null
            then 'no logs speedup: ' || coalesce(s.baseline_note, 'no matched baseline')
                 || '; import the log of a deployment that does not speculate, with the same --model, to decide it'
        when coalesce(i.usable_intervals, 0) = 0
            then 'no logs speedup: none of this deployment''s log intervals has a start, a generation throughput '
                 || 'and running requests'
        when coalesce(b.usable_intervals, 0) = 0
            then 'no logs speedup: baseline ' || s.baseline_id || ' has no log interval with a start, a generation '
                 || 'throughput and running requests; import its engine log'
        when h.deployment_id is null
            then 'no logs speedup: this deployment and ' || s.baseline_id || ' never logged the same batch bucket of '
                 || 'running requests'
        else 'not enough data: no batch bucket both logged has ' || min_log_intervals() || ' usable log intervals of '
             || 'each (the most: ' || h.most_of_both || '; [evidence] min_log_intervals)'
    end as log_speedup_note
from speculative as s
left join log_interval_counts as i on i.deployment_id = s.deployment_id
left join log_interval_counts as b on b.deployment_id = s.baseline_id
left join covered as c on c.deployment_id = s.deployment_id
left join shared as h on h.deployment_id = s.deployment_id
