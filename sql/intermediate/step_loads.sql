-- Each decode step as a unit of the matched speedup (docs/metrics.md, "Speedup at the
-- load and context each step ran at"): the load it ran at (its batch size), the context
-- its requests held, the tokens it committed and the time its requests waited.
-- Grain: one row per (deployment_id, step_uid) of a clean decode-only step
-- (num_prefill_tokens = 0) that clean rounds name.
--
-- context_tokens is X, the tokens of context in the batch: Σ context_len over the step's
-- rounds, null when a round has none (the matched speedup then matches on load alone).
-- context_per_request = X / rounds is what the report shows of it. time_ms = rounds ×
-- duration: every request of the step waits for the whole step, so a round's time is its
-- step's (docs/metrics.md, "Timing and speedup"); an exact DECIMAL, like every sum of it.
-- time_block: the step's block of time, 1 to intervals_blocks(), in order of start time:
-- equal numbers of the deployment's decode steps each, which the interval resamples
-- (analyzer/analysis/uncertainty.py). Steps that start together are ordered by step_id,
-- the id the trace wrote, so every engine cuts the blocks alike; steps of two partitions
-- with one start time and one step_id (a day copied under another date) last by
-- step_uid, so a run never leaves their order to the threads (step_uid is each engine's
-- own hash when the trace wrote none: only such ties may then be cut apart differently).
select
    r.deployment_id,
    r.step_uid,
    epoch_us(s.start_time) as start_us,
    s.batch_size,
    case when r.context_rounds = r.num_rounds then r.context_tokens end as context_tokens,
    r.num_rounds,
    r.num_committed_tokens,
    r.num_rounds * exact_ms(s.duration_ms) as time_ms,
    ntile(intervals_blocks()) over (partition by r.deployment_id order by s.start_time, r.step_id, r.step_uid) as time_block
from step_rounds as r
join steps as s on s.step_uid = r.step_uid
where s.num_prefill_tokens = 0
