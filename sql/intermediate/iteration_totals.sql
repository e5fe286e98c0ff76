-- What a deployment without rounds has of steps with their own token counts (engine
-- iteration lines): the coverage's denominator of the speedup on them (basis iterations,
-- matched_speedup) and what the report says it rests on.
-- Grain: one row per deployment_id of iteration_steps.
--
-- committed_tokens: Σ num_committed_tokens over all those steps, prefill steps' included
-- (as the rounds' denominator counts rounds in prefill steps); decode_steps: the steps of
-- iteration_loads, the speedup's units; window_steps: those of them whose counts were
-- spread from a log window (counts_from 'window'), an estimate the verdict states.
with counted as (
    select deployment_id, sum(cast(num_committed_tokens as bigint)) as committed_tokens
    from iteration_steps
    group by deployment_id
),

decode as (
    select
        deployment_id,
        count(*) as decode_steps,
        count(*) filter (where counts_from = 'window') as window_steps
    from iteration_loads
    group by deployment_id
)

select
    c.deployment_id,
    c.committed_tokens,
    coalesce(d.decode_steps, 0) as decode_steps,
    coalesce(d.window_steps, 0) as window_steps
from counted as c
left join decode as d on d.deployment_id = c.deployment_id
