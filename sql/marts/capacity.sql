-- Capacity per deployment: finished and failed requests, preemptions, KV usage,
-- the share of KV that drafts occupy, and output throughput over the wall clock.
-- Grain: one row per deployment_id.
with request_totals as (
    select
        deployment_id,
        count(*) as num_requests,
        count(*) filter (where finish_reason in ('stop', 'length')) as completed_requests,
        count(*) filter (where finish_reason in ('abort', 'error')) as failed_requests,
        sum(num_preemptions) as num_preemptions,
        sum(output_tokens) as output_tokens,
        date_diff('microsecond', min(arrival_time), max(finish_time)) / 1e6 as span_s
    from requests
    group by deployment_id
),

step_drafts as (
    select step_uid, num_draft_tokens as draft_tokens
    from step_rounds
),

step_totals as (
    select
        s.deployment_id,
        count(*) as num_steps,
        -- a DOUBLE mean, added in step order so that every run adds it alike
        avg(s.kv_usage order by s.step_uid) as kv_usage_mean,
        max(s.kv_usage) as kv_usage_max,
        -- the mean of draft_tokens / kv_capacity_tokens, one capacity per deployment:
        -- an exact integer mean, divided once
        avg(coalesce(r.draft_tokens, 0)) / any_value(d.kv_capacity_tokens) as candidate_kv_share
    from steps as s
    join deployments as d on d.deployment_id = s.deployment_id
    left join step_drafts as r on r.step_uid = s.step_uid
    group by s.deployment_id
)

select
    d.deployment_id,
    coalesce(q.num_requests, 0) as num_requests,
    q.completed_requests,
    q.failed_requests,
    -- unknown, not 0, when no requests file carries the column
    case
        when (select present from trace_columns
              where table_name = 'requests' and column_name = 'num_preemptions')
            then q.num_preemptions / nullif(q.num_requests, 0)
    end as preemptions_per_request,
    s.kv_usage_mean,
    s.kv_usage_max,
    s.candidate_kv_share,
    q.output_tokens / nullif(q.span_s, 0) as output_tokens_per_s
from deployments as d
left join request_totals as q on q.deployment_id = d.deployment_id
left join step_totals as s on s.deployment_id = d.deployment_id
