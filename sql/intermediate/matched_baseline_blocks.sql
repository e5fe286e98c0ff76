-- A baseline's supported load cells summed per block of time: what the interval of the
-- matched speedup deletes a block at a time (analyzer/analysis/uncertainty.py), with the
-- same sums as matched_support.
-- Grain: one row per (basis, deployment_id, time_block, cell) of a supported cell of a
-- deployment with method none; blocks: how many blocks of time its units of the basis fill.
with units as (
    select u.*
    from matched_units as u
    join deployments as d on d.deployment_id = u.deployment_id and d.method = 'none'
),

blocks as (
    select basis, deployment_id, max(time_block) as blocks
    from units
    group by basis, deployment_id
)

select
    u.basis,
    u.deployment_id,
    u.time_block,
    u.cell,
    k.blocks,
    sum(u.tokens) as tokens,
    sum(u.time_ms) as time_ms,
    sum(u.tokens * u.context_tokens) as tx,
    sum(u.tokens * u.context_tokens * u.context_tokens) as txx,
    sum(u.time_ms * u.context_tokens) as yx
from units as u
join matched_support as s on s.basis = u.basis and s.deployment_id = u.deployment_id and s.cell = u.cell
join blocks as k on k.basis = u.basis and k.deployment_id = u.deployment_id
where s.supported
group by u.basis, u.deployment_id, u.time_block, u.cell, k.blocks
