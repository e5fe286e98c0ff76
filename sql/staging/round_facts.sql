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
    q.request_uid is not null as has_request,
    step_end_time(s.start_time, s.duration_ms) as end_time,
    s.duration_ms,
    s.draft_ms,
    s.verify_ms,
    s.other_ms,
    s.parts_overlap,
    s.batch_size,
    s.decode_only,
    batch_bucket(s.batch_size) as batch_bucket,
    context_bucket(r.context_len) as context_bucket,
    coalesce(q.category, 'unlabeled') as category,
    coalesce(q.structured_output, false) as structured_output,
    q.temperature,
    temperature_bucket(q.temperature) as temperature_bucket
from rounds as r
left join step_parts as s on r.step_uid = s.step_uid
left join request_labels as q on r.request_uid = q.request_uid
