-- 95 % intervals of each deployment's headline numbers (mean accept length, speedup,
-- tpot_speedup), by a Poisson bootstrap over its requests (docs/metrics.md). Each request
-- is in one of 256 groups (request_group, the same on every engine); in each of
-- intervals_replicates() replicates every group of a deployment gets a weight drawn from
-- Poisson(1) by a hash of (deployment, replicate, group, intervals_seed()) (the macro
-- bootstrap_weight), so a run gives
-- the same intervals every time and a baseline's groups are drawn independently of its
-- deployment's. The interval is the used replicates' 2.5 % and 97.5 % quantiles.
-- Grain: one row per deployment_id with rounds or request timings.
--
-- A replicate's
--   accept length = 1 + Σ accepted* / Σ speculative rounds*,
--   speedup       = Σ_b t0*(b)·C*(b) / Σ_b T*(b), t0*(b) = T_B*(b) / C_B*(b), over the
--                   buckets b the full sample covers (speedup: a usable t0, after the
--                   guard), the same buckets in every replicate,
--   tpot_speedup  = [Σ_B dur* / Σ_B tok*] / [Σ_D dur* / Σ_D tok*] over the requests
--                   tpot_speedup counts (output_tokens > 1, both times known),
-- with * the weighted sums. A replicate in which a covered bucket's resampled baseline
-- has no tokens (t0* undefined), or a denominator is 0, is dropped, never computed over
-- fewer buckets: *_replicates counts the replicates used, of `replicates`.
--
-- The bootstrap's cost is fixed per deployment: groups × replicates weights and, per
-- replicate, one dot product per weighted sum. Each deployment's sums are vectors in
-- group order (one per batch bucket, by the bucket's position in the seed) and each
-- replicate one row, whose weighted sums are list_dot_product of its weights with them:
-- a fixed order of addition, so every run adds alike, and no join or group-by per
-- (replicate, group). docs/performance.md has the measurements.
with replicates as (
    select unnest(range(intervals_replicates())) as replicate
),

cells as materialized (
    -- request_group_cells is a plain view, a pass over the rounds: read once here
    select * from request_group_cells
),

positions as (
    select position, label as batch_bucket
    from buckets
    where kind = 'batch' and position > 0
),

groups as (
    select deployment_id, request_group from cells
    union
    select deployment_id, request_group from request_group_tpot
),

group_totals as (
    -- per (deployment, group): what accept length and tpot_speedup sum
    select
        g.deployment_id,
        g.request_group,
        coalesce(c.num_spec_rounds, 0) as num_spec_rounds,
        coalesce(c.num_accepted_tokens, 0) as num_accepted_tokens,
        coalesce(t.duration_us, 0) as duration_us,
        coalesce(t.tokens, 0) as tokens
    from groups as g
    left join (
        select deployment_id, request_group, sum(num_spec_rounds) as num_spec_rounds,
               sum(num_accepted_tokens) as num_accepted_tokens
        from cells
        group by deployment_id, request_group
    ) as c on c.deployment_id = g.deployment_id and c.request_group = g.request_group
    left join request_group_tpot as t on t.deployment_id = g.deployment_id and t.request_group = g.request_group
),

bucket_cells as (
    -- per (deployment, batch bucket position, group): committed tokens and time, 0 where none
    select
        g.deployment_id,
        p.position,
        g.request_group,
        coalesce(c.num_committed_tokens, 0) as num_committed_tokens,
        coalesce(c.time_ms, 0) as time_ms
    from groups as g
    cross join positions as p
    left join cells as c
        on c.deployment_id = g.deployment_id
        and c.request_group = g.request_group
        and c.batch_bucket = p.batch_bucket
),

bucket_vectors as (
    select
        deployment_id,
        position,
        list(cast(num_committed_tokens as double) order by request_group) as committed,
        list(cast(time_ms as double) order by request_group) as time_ms
    from bucket_cells
    group by deployment_id, position
),

vectors as (
    -- a deployment's sums in group order: one vector per quantity, and per batch bucket
    -- (list index = the bucket's position) for committed tokens and time
    select
        t.deployment_id,
        t.groups,
        t.spec_rounds,
        t.accepted,
        t.duration_us,
        t.tokens,
        b.committed,
        b.time_ms
    from (
        select
            deployment_id,
            list(request_group order by request_group) as groups,
            list(cast(num_spec_rounds as double) order by request_group) as spec_rounds,
            list(cast(num_accepted_tokens as double) order by request_group) as accepted,
            list(cast(duration_us as double) order by request_group) as duration_us,
            list(cast(tokens as double) order by request_group) as tokens
        from group_totals
        group by deployment_id
    ) as t
    join (
        select deployment_id, list(committed order by position) as committed, list(time_ms order by position) as time_ms
        from bucket_vectors
        group by deployment_id
    ) as b on b.deployment_id = t.deployment_id
),

weights as (
    select
        v.deployment_id,
        p.replicate,
        v.spec_rounds,
        v.accepted,
        v.duration_us,
        v.tokens,
        v.committed,
        v.time_ms,
        list_transform(v.groups, lambda g: bootstrap_weight(v.deployment_id, p.replicate, g, intervals_seed()))
            as w
    from vectors as v
    cross join replicates as p
),

weighted as materialized (
    -- the replicate's weighted sums: per bucket position for committed tokens and time.
    -- Read five times below: materialized, it is computed once (0.71 s against 0.49 s at
    -- 16,000 replicates over the sample's six deployments)
    select
        deployment_id,
        replicate,
        list_dot_product(w, spec_rounds) as spec_rounds,
        list_dot_product(w, accepted) as accepted,
        list_dot_product(w, duration_us) as duration_us,
        list_dot_product(w, tokens) as tokens,
        batch_bucket_dot_products(w, committed) as committed,
        batch_bucket_dot_products(w, time_ms) as time_ms
    from weights
),

covered as (
    -- the buckets the full sample's speedup covers (as the speedup view counts them)
    select
        t.deployment_id,
        t.baseline_id,
        list(p.position order by p.position) as positions
    from baseline_t0 as t
    join decode_totals as d
        on d.deployment_id = t.deployment_id
        and d.batch_bucket = t.batch_bucket
        and d.grouping = 'batch'
    join positions as p on p.batch_bucket = t.batch_bucket
    where t.context_bucket is null and t.t0_ms is not null
    group by t.deployment_id, t.baseline_id
),

speedups as (
    select
        k.deployment_id,
        d.replicate,
        case
            when list_min(list_transform(k.positions, lambda i: b.committed[i])) > 0
                and list_sum(list_transform(k.positions, lambda i: d.time_ms[i])) > 0
                then list_sum(list_transform(k.positions, lambda i: b.time_ms[i] / b.committed[i] * d.committed[i]))
                     / list_sum(list_transform(k.positions, lambda i: d.time_ms[i]))
        end as speedup
    from covered as k
    join weighted as d on d.deployment_id = k.deployment_id
    join weighted as b on b.deployment_id = k.baseline_id and b.replicate = d.replicate
),

tpot_speedups as (
    select
        m.deployment_id,
        d.replicate,
        case
            when b.tokens > 0 and d.tokens > 0 and d.duration_us > 0
                then (b.duration_us / b.tokens) / (d.duration_us / d.tokens)
        end as tpot_speedup
    from tpot_speedup as m
    join weighted as d on d.deployment_id = m.deployment_id
    join weighted as b on b.deployment_id = m.baseline_id and b.replicate = d.replicate
    where m.tpot_speedup is not null
),

per_replicate as (
    select
        a.deployment_id,
        a.replicate,
        case when a.spec_rounds > 0 then 1 + a.accepted / a.spec_rounds end as accept_length,
        s.speedup,
        t.tpot_speedup
    from weighted as a
    left join speedups as s on s.deployment_id = a.deployment_id and s.replicate = a.replicate
    left join tpot_speedups as t on t.deployment_id = a.deployment_id and t.replicate = a.replicate
)

select
    r.deployment_id,
    intervals_replicates() as replicates,
    count(r.accept_length) as accept_length_replicates,
    quantile_cont(r.accept_length, 0.025) as mean_accept_length_lo,
    quantile_cont(r.accept_length, 0.975) as mean_accept_length_hi,
    count(r.speedup) as speedup_replicates,
    quantile_cont(r.speedup, 0.025) as speedup_lo,
    quantile_cont(r.speedup, 0.975) as speedup_hi,
    count(r.tpot_speedup) as tpot_speedup_replicates,
    quantile_cont(r.tpot_speedup, 0.025) as tpot_speedup_lo,
    quantile_cont(r.tpot_speedup, 0.975) as tpot_speedup_hi
from per_replicate as r
group by r.deployment_id
