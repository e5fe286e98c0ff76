-- Capacity per deployment: finished and failed requests, preemptions, KV usage,
-- the share of KV that drafts occupy, and output throughput: over the wall clock
-- (output_tokens_per_s: the requests' output tokens ÷ first arrival to last finish,
-- which idle hours dilute), over busy time (output_tokens_per_busy_s: tokens committed
-- by the clean steps' rounds, or by the steps themselves when there are no rounds, ÷ the
-- summed step durations) and in the busiest clock hour
-- (peak_hour_output_tokens_per_s: tokens committed by steps starting in it ÷ 3600 s,
-- and peak_hour, when that hour began; the earliest of equally busy hours). The peak
-- hour measures the traffic when the engine keeps up with it: deployments that
-- served the same requests then show the same rate.
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

-- a step's drafted and committed tokens: summed from its rounds, or, in a deployment
-- without rounds, the counts the step carries itself (iteration lines, the vLLM recorder)
step_drafts as (
    select step_uid, num_draft_tokens as draft_tokens, num_committed_tokens as committed_tokens
    from step_rounds
    union all
    select step_uid, num_draft_tokens as draft_tokens, num_committed_tokens as committed_tokens
    from iteration_steps
),

hourly as (
    select s.deployment_id, date_trunc('hour', s.start_time) as hour, sum(r.committed_tokens) as committed_tokens
    from steps as s
    join step_drafts as r on r.step_uid = s.step_uid
    group by s.deployment_id, date_trunc('hour', s.start_time)
),

ranked_hours as (
    select
        deployment_id,
        hour,
        committed_tokens,
        row_number() over (partition by deployment_id order by committed_tokens desc, hour) as rank
    from hourly
),

peak_hour as (
    select deployment_id, hour as peak_hour, committed_tokens / 3600.0 as peak_hour_output_tokens_per_s
    from ranked_hours
    where rank = 1
),

step_totals as (
    select
        s.deployment_id,
        count(*) as num_steps,
        -- a DOUBLE mean, added in the order of its values: every run adds it alike, whatever
        -- the link keys (hashed or written)
        avg(s.kv_usage order by s.kv_usage) as kv_usage_mean,
        max(s.kv_usage) as kv_usage_max,
        -- the mean of draft_tokens / kv_capacity_tokens, one capacity per deployment:
        -- an exact integer mean, divided once
        avg(coalesce(r.draft_tokens, 0)) / any_value(d.kv_capacity_tokens) as candidate_kv_share,
        sum(coalesce(r.committed_tokens, 0)) as committed_tokens,
        -- exact DECIMAL, so the sum is the same in any order
        sum(exact_ms(s.duration_ms)) as busy_ms
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
    q.output_tokens / nullif(q.span_s, 0) as output_tokens_per_s,
    s.committed_tokens / nullif(cast(s.busy_ms as double) / 1000, 0) as output_tokens_per_busy_s,
    p.peak_hour_output_tokens_per_s,
    p.peak_hour
from deployments as d
left join request_totals as q on q.deployment_id = d.deployment_id
left join step_totals as s on s.deployment_id = d.deployment_id
left join peak_hour as p on p.deployment_id = d.deployment_id
