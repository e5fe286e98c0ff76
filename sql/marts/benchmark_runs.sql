-- The benchmark clients' runs per deployment (intervals rows of a benchmark source,
-- benchmark_source): how many, and from which sources, for the report's note that a
-- deployment's numbers include a benchmark's traffic.
-- Grain: one row per deployment_id with a benchmark run.
select
    deployment_id,
    count(*) as runs,
    list(distinct source order by source) as sources
from intervals
where benchmark_source(source)
group by deployment_id
