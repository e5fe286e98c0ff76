-- The engine logs' intervals of each deployment counted by what the logs speedup can
-- use (log_intervals.left_out), and the tokens of the usable ones: what log_speedup
-- reads of the intervals, so a scale-out engine brings back a row per deployment.
-- Grain: one row per deployment_id with log intervals.
select
    deployment_id,
    count(*) as log_intervals,
    count(*) filter (where left_out is null) as usable_intervals,
    count(*) filter (where left_out = 'no start') as intervals_without_start,
    count(*) filter (where left_out = 'no throughput') as intervals_without_throughput,
    count(*) filter (where left_out = 'no running count') as intervals_without_running,
    count(*) filter (where left_out = 'idle') as idle_intervals,
    cast(sum(token_us) filter (where left_out is null) as double) / 1e6 as usable_tokens
from log_intervals
group by deployment_id
