-- Each decode step of a deployment without rounds as a unit of the matched speedup, with
-- the token counts the step carries itself (docs/trace-format.md, "Token counts without
-- rounds"): engine iteration lines (vLLM's iteration details, TensorRT-LLM's iteration
-- statistics) give steps and their counts, but no request ids, so no rounds.
-- Grain: one row per (deployment_id, step_uid) of iteration_steps that is decode-only
-- (num_prefill_tokens = 0, batch_size > 0).
--
-- As in step_loads: the load is the batch size and time_ms = batch_size × duration,
-- every request of the step waiting for the whole step; no context (iteration lines
-- carry none per request). time_block: the step's block of time, 1 to
-- intervals_blocks(), in order of start time, then step_id, then step_uid.
select
    deployment_id,
    step_uid,
    epoch_us(start_time) as start_us,
    batch_size,
    num_committed_tokens,
    counts_from,
    batch_size * exact_ms(duration_ms) as time_ms,
    ntile(intervals_blocks()) over (partition by deployment_id order by start_time, step_id, step_uid) as time_block
from iteration_steps
where num_prefill_tokens = 0 and batch_size > 0
