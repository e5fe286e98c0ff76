-- Acceptance from aggregate counters (vLLM log lines, Prometheus counters), per hour.
-- Grain: one row per deployment_id, hour (the hour of each interval's end_time).
--
-- mean_accept_length = 1 + Σ accepted / Σ num_drafts, null when any interval of the
-- hour lacks num_drafts; vllm_rate[i] = Σ accepted_per_position[i] / Σ num_drafts.
with by_hour as (
    select
        deployment_id,
        date_trunc('hour', end_time) as hour,
        count(*) as num_intervals,
        count(*) filter (where num_drafts is null) as intervals_without_drafts,
        sum(num_drafts) as num_drafts,
        sum(num_draft_tokens) as num_draft_tokens,
        sum(num_accepted_tokens) as num_accepted_tokens
    from intervals
    group by all
),

per_position as (
    select
        deployment_id,
        date_trunc('hour', end_time) as hour,
        unnest(range(1, len(accepted_per_position) + 1)) as position,
        unnest(accepted_per_position) as accepted
    from intervals
    where accepted_per_position is not null
),

positions as (
    select deployment_id, hour, list(accepted order by position) as accepted_per_position
    from (
        select deployment_id, hour, position, sum(accepted) as accepted
        from per_position
        group by all
    )
    group by all
)

select
    h.deployment_id,
    h.hour,
    h.num_intervals,
    h.num_drafts,
    h.num_draft_tokens,
    h.num_accepted_tokens,
    case when h.intervals_without_drafts = 0
        then 1 + h.num_accepted_tokens / nullif(h.num_drafts, 0) end as mean_accept_length,
    h.num_accepted_tokens / nullif(h.num_draft_tokens, 0) as acceptance_rate,
    case when h.intervals_without_drafts = 0 and h.num_drafts > 0
        then list_transform(p.accepted_per_position, lambda a: a / h.num_drafts) end as vllm_rate,
    h.intervals_without_drafts
from by_hour as h
left join positions as p on p.deployment_id = h.deployment_id and p.hour = h.hour
