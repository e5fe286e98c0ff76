-- Each request's max_stall (docs/metrics.md: the largest of its streaming gaps): from
-- request_rounds for packed requests, from request_gaps_unpacked for the rest.
-- Grain: one row per request (deployment_id, request_uid) with a known max_stall.
--
-- A request with no gap (no first token time and one emission, or no timed round)
-- has no row: its max_stall is unknown, not zero.
with unpacked as (
    select deployment_id, request_uid, max(gap_ms) as max_stall_ms
    from request_gaps_unpacked
    group by deployment_id, request_uid
)

select deployment_id, request_uid, request_id, max_stall_ms
from request_rounds
where packed and max_stall_ms is not null
union all
select u.deployment_id, u.request_uid, r.request_id, u.max_stall_ms
from unpacked as u
join request_rounds as r on r.request_uid = u.request_uid
