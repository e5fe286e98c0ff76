-- Every clean round with what the views need from its step and its request.
-- Grain: one row per round (deployment_id, request_id, round_idx, partitions).
--
-- A round's time is its step's duration: every request in a step waits for the
-- whole step. Rounds whose step is missing or rejected keep null timings, so
-- they still count for acceptance but drop out of timing metrics.
with step_parts as (
    select
        step_uid,
        start_time,
        duration_ms,
        draft_ms,
        verify_ms,
        -- other is unknown when a part is unknown or when the parts overlap
        -- (asynchronous drafting): then draft + verify exceeds the step.
        case
            when draft_ms + verify_ms <= duration_ms then duration_ms - draft_ms - verify_ms
        end as other_ms,
        draft_ms + verify_ms > duration_ms as parts_overlap,
        batch_size,
        num_prefill_tokens = 0 as decode_only
    from steps
),

request_labels as (
    select request_uid, category, structured_output, temperature
    from requests
)

select
    r.deployment_id,
    r.request_id,
    r.round_idx,
    r.request_uid,
    r.step_uid,
    r.num_draft_tokens,
    r.num_invalidated_tokens,
    r.num_accepted_tokens,
    r.num_committed_tokens,
    r.num_verified_nodes,
    r.stop_reason,
    r.context_len,
    s.step_uid is not null as has_step,
    s.start_time + to_microseconds(cast(round(s.duration_ms * 1000) as bigint)) as end_time,
    s.duration_ms,
    s.draft_ms,
    s.verify_ms,
    s.other_ms,
    s.parts_overlap,
    s.batch_size,
    s.decode_only,
    case
        when s.batch_size is null then null
        when s.batch_size <= 1 then '1'
        when s.batch_size = 2 then '2'
        when s.batch_size <= 4 then '3-4'
        when s.batch_size <= 8 then '5-8'
        when s.batch_size <= 16 then '9-16'
        when s.batch_size <= 32 then '17-32'
        when s.batch_size <= 64 then '33-64'
        when s.batch_size <= 128 then '65-128'
        when s.batch_size <= 256 then '129-256'
        when s.batch_size <= 512 then '257-512'
        else '513+'
    end as batch_bucket,
    case
        when r.context_len is null then null
        when r.context_len < 1024 then '0-1k'
        when r.context_len < 2048 then '1k-2k'
        when r.context_len < 4096 then '2k-4k'
        when r.context_len < 8192 then '4k-8k'
        when r.context_len < 16384 then '8k-16k'
        when r.context_len < 32768 then '16k-32k'
        else '32k+'
    end as context_bucket,
    coalesce(q.category, 'unlabeled') as category,
    coalesce(q.structured_output, false) as structured_output,
    q.temperature,
    case
        when q.temperature is null then 'unknown'
        when q.temperature <= 0 then '0'
        when q.temperature <= 0.5 then '(0,0.5]'
        when q.temperature <= 1 then '(0.5,1]'
        else '>1'
    end as temperature_bucket
from rounds as r
left join step_parts as s on r.step_uid = s.step_uid
left join request_labels as q on r.request_uid = q.request_uid
