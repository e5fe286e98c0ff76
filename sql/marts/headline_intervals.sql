-- 95 % intervals of each deployment's headline numbers (mean accept length, speedup), by
-- a Poisson bootstrap over its requests. In each of 200 replicates every group of
-- requests (request_group_cells: 64 random subsets) gets a weight drawn from Poisson(1)
-- by a hash of (deployment, replicate, group): the same run gives the same intervals,
-- and a baseline's groups are drawn independently of its deployment's. A replicate's
-- speedup is Σ_b t0*(b)·C*(b) / Σ_b T*(b) over the batch buckets where the baseline has
-- a t0, with t0*(b) the baseline's resampled T/C; its accept length is
-- 1 + Σ accepted* / Σ speculative rounds*. The interval is the replicates' 2.5 % and
-- 97.5 % quantiles.
-- Grain: one row per deployment_id with rounds.
with replicates as (
    select unnest(range(200)) as replicate
),

groups as (
    select distinct deployment_id, request_group
    from request_group_cells
),

draws as (
    select
        g.deployment_id,
        g.request_group,
        p.replicate,
        cast(hash(g.deployment_id, p.replicate, g.request_group) as double) / 18446744073709551616.0 as u
    from groups as g
    cross join replicates as p
),

weights as (
    -- the inverse of Poisson(1)'s distribution function
    select
        deployment_id,
        request_group,
        replicate,
        case
            when u < 0.36787944117144233 then 0
            when u < 0.7357588823428847 then 1
            when u < 0.9196986029286058 then 2
            when u < 0.9810118431238462 then 3
            when u < 0.9963401531726563 then 4
            when u < 0.9994058151824183 then 5
            when u < 0.9999167588507119 then 6
            else 7
        end as w
    from draws
),

weighted as (
    -- integer and DECIMAL sums: exact, so every run adds them alike
    select
        c.deployment_id,
        w.replicate,
        c.batch_bucket,
        sum(w.w * c.num_spec_rounds) as num_spec_rounds,
        sum(w.w * c.num_accepted_tokens) as num_accepted_tokens,
        sum(w.w * c.num_committed_tokens) as num_committed_tokens,
        sum(w.w * c.time_ms) as time_ms
    from request_group_cells as c
    join weights as w on w.deployment_id = c.deployment_id and w.request_group = c.request_group
    group by c.deployment_id, w.replicate, c.batch_bucket
),

acceptance as (
    select
        deployment_id,
        replicate,
        1 + sum(num_accepted_tokens) / nullif(sum(num_spec_rounds), 0) as accept_length
    from weighted
    group by deployment_id, replicate
),

baseline_t0 as (
    select
        m.deployment_id,
        b.replicate,
        b.batch_bucket,
        cast(b.time_ms as double) / nullif(b.num_committed_tokens, 0) as t0_ms
    from matched_baseline as m
    join weighted as b on b.deployment_id = m.baseline_id and b.batch_bucket is not null
),

speedups as (
    select
        s.deployment_id,
        s.replicate,
        -- a DOUBLE sum, added in bucket order so that every run adds it alike
        sum(t.t0_ms * s.num_committed_tokens order by s.batch_bucket)
            / nullif(cast(sum(s.time_ms) as double), 0) as speedup
    from weighted as s
    join baseline_t0 as t
        on t.deployment_id = s.deployment_id
        and t.replicate = s.replicate
        and t.batch_bucket = s.batch_bucket
    where t.t0_ms is not null
    group by s.deployment_id, s.replicate
)

select
    a.deployment_id,
    count(*) as replicates,
    quantile_cont(a.accept_length, 0.025) as mean_accept_length_lo,
    quantile_cont(a.accept_length, 0.975) as mean_accept_length_hi,
    quantile_cont(s.speedup, 0.025) as speedup_lo,
    quantile_cont(s.speedup, 0.975) as speedup_hi
from acceptance as a
left join speedups as s on s.deployment_id = a.deployment_id and s.replicate = a.replicate
group by a.deployment_id
