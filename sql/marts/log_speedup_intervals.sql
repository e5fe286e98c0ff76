-- 95 % interval of the logs speedup (log_speedup), by a Poisson bootstrap over the
-- engine-log intervals of the deployment and of its baseline. In each of
-- intervals_replicates() replicates every group of intervals (log_interval_cells: 64
-- random subsets per deployment) gets a weight drawn from Poisson(1) by a hash of
-- (deployment, replicate, group, intervals_seed()): the same run gives the same interval,
-- and a baseline's groups are drawn independently of its deployment's. A replicate's
-- speedup is Σ_b tokens*_D(b) / (tokens*_B(b) / seconds*_B(b)) / Σ_b seconds*_D(b) over
-- the buckets log_speedup counted; the interval is the replicates' 2.5 % and 97.5 %
-- quantiles. Intervals are resampled as independent: consecutive lines of a steady load
-- are alike, so the interval is no wider than the log's own spread.
-- Grain: one row per deployment_id with a log_speedup.
with replicates as (
    select unnest(range(intervals_replicates())) as replicate
),

counted as (
    select deployment_id, baseline_id, batch_bucket, bucket_min
    from log_speedup_by_batch
    where counted
),

sides as (
    select distinct deployment_id from counted
    union
    select distinct baseline_id from counted
),

weights as (
    select
        g.deployment_id,
        g.interval_group,
        p.replicate,
        poisson1_draw(bootstrap_hash(g.deployment_id, p.replicate, g.interval_group, intervals_seed())) as w
    from (select distinct deployment_id, interval_group from log_interval_cells
          where deployment_id in (select deployment_id from sides)) as g
    cross join replicates as p
),

weighted as (
    -- integer and DECIMAL sums: exact, so every run adds them alike
    select
        c.deployment_id,
        w.replicate,
        c.batch_bucket,
        sum(w.w * c.duration_us) as duration_us,
        sum(w.w * c.token_us) as token_us
    from log_interval_cells as c
    join weights as w on w.deployment_id = c.deployment_id and w.interval_group = c.interval_group
    group by c.deployment_id, w.replicate, c.batch_bucket
),

speedups as (
    select
        k.deployment_id,
        d.replicate,
        -- a DOUBLE sum, added in bucket order so that every run adds it alike
        sum(cast(d.token_us as double) * b.duration_us / cast(b.token_us as double) order by k.bucket_min)
            / nullif(sum(d.duration_us), 0) as speedup
    from counted as k
    join weighted as d on d.deployment_id = k.deployment_id and d.batch_bucket = k.batch_bucket
    join weighted as b
        on b.deployment_id = k.baseline_id and b.batch_bucket = k.batch_bucket and b.replicate = d.replicate
    where b.token_us > 0
    group by k.deployment_id, d.replicate
)

select
    deployment_id,
    count(speedup) as replicates,
    quantile_cont(speedup, 0.025) as log_speedup_lo,
    quantile_cont(speedup, 0.975) as log_speedup_hi
from speedups
group by deployment_id
