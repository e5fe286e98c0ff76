-- The distinct requests that ran decode-only rounds with a clean step at each batch size
-- up to 16: what a baseline's small load cell rests on (matched_support). Above 16 a
-- single step holds more distinct requests than any floor asks for.
-- Grain: one row per (deployment_id, batch_size) with such rounds, batch_size 1 to 16.
with sizes as (
    select unnest(range(1, 17)) as batch_size
)

select
    r.deployment_id,
    z.batch_size,
    count(*) as num_requests
from request_rounds as r
join sizes as z on r.decode_size_mask & (cast(1 as bigint) << (z.batch_size - 1)) <> 0
group by r.deployment_id, z.batch_size
