-- Each decode step of a deployment without rounds as a unit of the matched speedup, with
-- the token counts the step carries itself (docs/trace-format.md, "Token counts without
-- rounds"): engine iteration lines (vLLM's iteration details, TensorRT-LLM's iteration
-- statistics) give steps and their counts, but no request ids, so no rounds.
-- Grain: one row per (deployment_id, step_uid) of a clean decode-only step
-- (num_prefill_tokens = 0, batch_size > 0) with num_committed_tokens, of a deployment
-- that has no clean rounds.
--
-- As in step_loads: the load is the batch size and time_ms = batch_size × duration,
-- every request of the step waiting for the whole step; no context (iteration lines
-- carry none per request). time_block: the step's block of time, 1 to
-- intervals_blocks(), in order of start time, then step_id, then step_uid.
with with_rounds as (
    select distinct deployment_id
    from step_rounds
),

counted as (
    select
        s.deployment_id,
        s.step_uid,
        s.step_id,
        s.start_time,
        s.batch_size,
        s.num_committed_tokens,
        s.duration_ms,
        s.counts_from
    from steps as s
    left join with_rounds as w on w.deployment_id = s.deployment_id
    where w.deployment_id is null
        and s.num_prefill_tokens = 0
        and s.batch_size > 0
        and s.num_committed_tokens is not null
)

select
    deployment_id,
    step_uid,
    epoch_us(start_time) as start_us,
    batch_size,
    num_committed_tokens,
    counts_from,
    batch_size * exact_ms(duration_ms) as time_ms,
    ntile(intervals_blocks()) over (partition by deployment_id order by start_time, step_id, step_uid) as time_block
from counted
