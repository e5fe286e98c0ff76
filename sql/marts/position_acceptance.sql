-- Per draft position i: survival Pr(K ≥ i | drafted i), conditional acceptance a_i,
-- vLLM's per-position rate, and the marginal gain Π_{j≤i} a_j = ΔE[L] of position i.
-- Grain: one row per deployment_id, position (1 … max num_draft_tokens).
--
-- Works from the per-position counts (position_counts) over every context.
with counts as (
    select deployment_id, position, spec_rounds as r, drafted, accepted, reached
    from position_counts
    where context_bucket is null
),

rates as (
    select
        deployment_id,
        position,
        drafted,
        accepted,
        accepted / nullif(drafted, 0) as survival,
        accepted / nullif(reached, 0) as conditional,
        accepted / r as vllm_rate
    from counts
)

select
    deployment_id,
    position,
    drafted,
    accepted,
    survival,
    conditional,
    vllm_rate,
    -- A product of conditionals: 0 once some earlier position was never accepted,
    -- unknown from the first position no round reached otherwise.
    case
        when bool_or(conditional = 0) over w then 0.0
        when bool_and(conditional is not null) over w then product(conditional) over w
    end as marginal_gain
from rates
window w as (partition by deployment_id order by position rows between unbounded preceding and current row)
