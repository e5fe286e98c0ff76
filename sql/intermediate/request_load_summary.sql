-- The loads a deployment's timed requests decoded at (request_loads), summed up: what the
-- speedup from request timings names when the two sides never ran at comparable loads.
-- Grain: one row per deployment_id with timed requests of more than one output token.
select
    deployment_id,
    quantile_cont(load, 0.5) as load,
    min(load) as min_load,
    max(load) as max_load
from request_loads
where tokens > 0
group by deployment_id
