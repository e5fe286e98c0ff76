-- Per draft position i: survival Pr(K ≥ i | drafted i), conditional acceptance a_i,
-- vLLM's per-position rate, and the marginal gain Π_{j≤i} a_j = ΔE[L] of position i.
-- Grain: one row per deployment_id, position (1 … max num_draft_tokens).
--
-- Works from the (drafted, accepted) histogram (round_histogram).
with histogram as (
    select deployment_id, d, k, n
    from round_histogram
),

spec_rounds as (
    select deployment_id, sum(n) as r, max(d) as max_d
    from histogram
    group by deployment_id
),

positions as (
    select s.deployment_id, s.r, unnest(range(1, s.max_d + 1)) as position
    from spec_rounds as s
),

counts as (
    select
        p.deployment_id,
        p.position,
        p.r,
        coalesce(sum(h.n) filter (where h.d >= p.position), 0) as drafted,
        coalesce(sum(h.n) filter (where h.d >= p.position and h.k >= p.position), 0) as accepted,
        coalesce(sum(h.n) filter (where h.d >= p.position and h.k >= p.position - 1), 0) as reached
    from positions as p
    join histogram as h on h.deployment_id = p.deployment_id
    group by all
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
