-- Acceptance from aggregate counters (vLLM log lines, Prometheus counters, benchmark
-- summaries), per hour.
-- Grain: one row per deployment_id, hour (the hour of each interval's end_time), benchmark
-- (whether the intervals are benchmark runs, benchmark_source: a benchmark's totals are
-- never summed with production counters of the same hour).
--
-- An hour is counted from one source (source; the others present are other_sources):
-- a deployment's log, responses and Prometheus counters count the same drafts, so
-- their sum would count them twice or three times. The view reconciliation compares
-- them.
--
-- mean_accept_length = 1 + Σ accepted / Σ num_drafts over the intervals that have a
-- draft count (num_drafts), and drafts_share says what share of the hour's draft
-- tokens those intervals hold: an hour with one interval lacking its count is not
-- left blank. vllm_rate[i] = Σ accepted_per_position[i] / Σ num_drafts over the
-- intervals with both. Load columns average the intervals that carry them, and so does
-- the accept length the engine printed (reported_accept_length, rounded as printed, in
-- the engine's own definition: SGLang's is committed tokens per verify step).
with hour_sources as (
    select
        deployment_id,
        date_trunc('hour', end_time) as hour,
        benchmark_source(source) as benchmark,
        source,
        count(num_draft_tokens) > 0 as has_counts
    from intervals
    group by all
),

chosen as (
    -- several channels of one deployment in the same hour (its log, its responses, its
    -- Prometheus counters) count the same drafts: the hour is counted from one, the most
    -- detailed with token counts (channel_precedence); reconciliation compares them
    select
        deployment_id,
        hour,
        benchmark,
        arg_min(source, (not has_counts, channel_precedence(source), source)) as source,
        list(source order by source) as sources
    from hour_sources
    group by all
),

counted as (
    select i.*, date_trunc('hour', i.end_time) as hour, benchmark_source(i.source) as benchmark
    from intervals as i
    semi join chosen as c
        on c.deployment_id = i.deployment_id
        and c.hour = date_trunc('hour', i.end_time)
        and c.benchmark = benchmark_source(i.source)
        and c.source = i.source
),

by_hour as (
    select
        deployment_id,
        hour,
        benchmark,
        count(*) as num_intervals,
        count(*) filter (where num_drafts is null) as intervals_without_drafts,
        sum(num_drafts) as num_drafts,
        sum(num_draft_tokens) as num_draft_tokens,
        sum(num_accepted_tokens) as num_accepted_tokens,
        sum(num_accepted_tokens) filter (where num_drafts is not null) as accepted_with_drafts,
        sum(num_draft_tokens) filter (where num_drafts is not null) as draft_tokens_with_drafts,
        sum(num_drafts) filter (where accepted_per_position is not null) as drafts_with_positions,
        avg(running_requests order by series, end_time) as mean_running_requests,
        avg(generation_tokens_per_s order by series, end_time) as mean_generation_tokens_per_s,
        avg(kv_cache_usage order by series, end_time) as mean_kv_cache_usage,
        avg(reported_accept_length order by series, end_time) as mean_reported_accept_length,
        min(reported_accept_length_definition) as reported_accept_length_definition
    from counted
    group by all
),

per_position as (
    -- one unnest, then the list indexed: two unnests side by side zip in DuckDB but
    -- multiply in Spark
    select deployment_id, hour, benchmark, position, accepted_per_position[position] as accepted
    from (
        select
            deployment_id,
            hour,
            benchmark,
            accepted_per_position,
            unnest(range(1, array_length(accepted_per_position) + 1)) as position
        from counted
        where accepted_per_position is not null and num_drafts is not null
    )
),

positions as (
    select deployment_id, hour, benchmark, list(accepted order by position) as accepted_per_position
    from (
        select deployment_id, hour, benchmark, position, sum(accepted) as accepted
        from per_position
        group by all
    )
    group by all
)

select
    h.deployment_id,
    h.hour,
    h.benchmark,
    h.num_intervals,
    h.num_drafts,
    h.num_draft_tokens,
    h.num_accepted_tokens,
    1 + h.accepted_with_drafts / nullif(h.num_drafts, 0) as mean_accept_length,
    h.num_accepted_tokens / nullif(h.num_draft_tokens, 0) as acceptance_rate,
    case when h.drafts_with_positions > 0
        then list_transform(p.accepted_per_position, lambda a: a / h.drafts_with_positions) end as vllm_rate,
    h.intervals_without_drafts,
    h.draft_tokens_with_drafts / nullif(h.num_draft_tokens, 0) as drafts_share,
    h.mean_running_requests,
    h.mean_generation_tokens_per_s,
    h.mean_kv_cache_usage,
    h.mean_reported_accept_length,
    h.reported_accept_length_definition,
    c.source,
    list_filter(c.sources, lambda s: s <> c.source) as other_sources
from by_hour as h
join chosen as c on c.deployment_id = h.deployment_id and c.hour = h.hour and c.benchmark = h.benchmark
left join positions as p on p.deployment_id = h.deployment_id and p.hour = h.hour and p.benchmark = h.benchmark
