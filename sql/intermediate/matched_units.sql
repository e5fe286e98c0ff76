-- The units the matched speedup compares, of every basis (docs/metrics.md, "Speedup at
-- the load and context each step ran at"): per unit the load it ran at, the tokens it
-- produced and the time they took, and for decode steps the context it held.
-- Grain: one row per (basis, deployment_id, unit):
--   basis 'steps':    a clean decode-only step (step_loads); load = its batch size,
--                     tokens = committed, time = rounds × duration
--   basis 'iterations': a clean decode-only step of a deployment without rounds, with
--                     its own token counts (iteration_loads); load = its batch size,
--                     tokens = its num_committed_tokens, time = batch size × duration
--   basis 'requests': a timed request with output_tokens > 1 (request_loads); load = its
--                     mean concurrency from request timings, tokens = output_tokens − 1,
--                     time = finish − first token
--   basis 'logs':     a usable engine-log interval (log_intervals); load = the requests
--                     running when it ended, tokens = generation throughput × seconds,
--                     time = its seconds
-- tokens / time is the unit's output rate per request (steps, requests) or in all (logs),
-- so the baseline's time per token at a load, Σ time / Σ tokens, is what plain decoding
-- would need per token there, and the same ratio of a speculative deployment is its own.
-- cell: the load's cell (load_cell); context_per_request: X / rounds of a step, the
-- tokens each of its requests held. Loads are exact tenths and tokens and times exact
-- DECIMALs, so every sum of them is the same whatever order they are added in.
select
    'steps' as basis,
    deployment_id,
    time_block,
    cast(batch_size as decimal(18, 1)) as load,
    load_cell(batch_size) as cell,
    batch_bucket(batch_size) as batch_bucket,
    context_bucket(context_tokens // num_rounds) as context_bucket,
    context_tokens,
    cast(context_tokens as double) / num_rounds as context_per_request,
    cast(num_committed_tokens as decimal(38, 6)) as tokens,
    cast(time_ms as decimal(38, 6)) as time_ms
from step_loads

union all

select
    'iterations',
    deployment_id,
    time_block,
    cast(batch_size as decimal(18, 1)),
    load_cell(batch_size),
    batch_bucket(batch_size),
    null,
    null,
    null,
    cast(num_committed_tokens as decimal(38, 6)),
    cast(time_ms as decimal(38, 6))
from iteration_loads

union all

select
    'requests',
    deployment_id,
    time_block,
    load,
    load_cell(load),
    batch_bucket(cast(round(load) as bigint)),
    null,
    null,
    null,
    cast(tokens as decimal(38, 6)),
    cast(time_ms as decimal(38, 6))
from request_loads
where tokens > 0

union all

select
    'logs',
    deployment_id,
    ntile(intervals_blocks()) over (partition by deployment_id order by end_time, series),
    cast(running_requests as decimal(18, 1)),
    load_cell(running_requests),
    batch_bucket,
    null,
    null,
    null,
    cast(token_us / 1000000 as decimal(38, 6)),
    cast(duration_us / 1000.0 as decimal(38, 6))
from log_intervals
where left_out is null
