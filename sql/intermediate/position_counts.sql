-- Per draft position i: the speculative rounds that drafted position i, accepted it, and
-- reached it (accepted position i − 1), over all of a deployment's rounds and within
-- each context bucket.
-- Grain: one row per deployment_id, context_bucket, position (1 … the deepest position
-- drafted in that scope); context_bucket null is every context of the deployment.
--
-- Works from the (drafted, accepted) histogram (round_histogram). Rounds without a
-- context_len count toward the deployment's row only.
with histogram as (
    select deployment_id, 'all' as scope, d, k, n
    from round_histogram
    union all
    select deployment_id, context_bucket as scope, d, k, n
    from round_histogram
    where context_bucket is not null
),

spec_rounds as (
    select deployment_id, scope, sum(n) as r, max(d) as max_d
    from histogram
    group by deployment_id, scope
),

positions as (
    select s.deployment_id, s.scope, s.r, unnest(range(1, cast(s.max_d as bigint) + 1)) as position
    from spec_rounds as s
)

select
    p.deployment_id,
    nullif(p.scope, 'all') as context_bucket,
    p.position,
    p.r as spec_rounds,
    coalesce(sum(h.n) filter (where h.d >= p.position), 0) as drafted,
    coalesce(sum(h.n) filter (where h.d >= p.position and h.k >= p.position), 0) as accepted,
    coalesce(sum(h.n) filter (where h.d >= p.position and h.k >= p.position - 1), 0) as reached
from positions as p
join histogram as h on h.deployment_id = p.deployment_id and h.scope = p.scope
group by p.deployment_id, p.scope, p.position, p.r
