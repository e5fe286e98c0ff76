-- The usable engine-log intervals summed per group and batch bucket of running requests:
-- what the logs speedup and its bootstrap (log_speedup_intervals) read. A group is one of
-- 64 random subsets of a deployment's intervals (log_intervals.interval_group).
-- Grain: one row per (deployment_id, interval_group, batch_bucket) with usable intervals.
select
    deployment_id,
    interval_group,
    batch_bucket,
    count(*) as num_intervals,
    sum(duration_us) as duration_us,
    sum(token_us) as token_us
from log_intervals
where left_out is null
group by deployment_id, interval_group, batch_bucket
