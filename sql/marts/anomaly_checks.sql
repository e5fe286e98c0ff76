-- How many requests each rule of request_anomalies could check, and how many it flagged.
-- Grain: one row per deployment_id, kind (looping, no_acceptance, stall).
--
-- The requests are those of the requests table and those with clean rounds. A request
-- is checked for looping when it has output_token_ids, for no_acceptance when it has
-- clean rounds, for stall when its max_stall is known; the rest are not_checked.
with known as (
    select deployment_id, request_uid from requests
    union
    select deployment_id, request_uid from request_rounds
),

checked as (
    select
        k.deployment_id,
        count(*) as num_requests,
        count(p.request_uid) as looping,
        count(r.request_uid) as no_acceptance,
        count(s.request_uid) as stall
    from known as k
    left join request_repetition as p on p.request_uid = k.request_uid
    left join request_rounds as r on r.request_uid = k.request_uid
    left join request_stalls as s on s.request_uid = k.request_uid
    group by k.deployment_id
),

flagged as (
    select deployment_id, kind, count(*) as flagged
    from request_anomalies
    group by deployment_id, kind
),

by_kind as (
    select deployment_id, 'looping' as kind, num_requests, looping as checked from checked
    union all
    select deployment_id, 'no_acceptance', num_requests, no_acceptance from checked
    union all
    select deployment_id, 'stall', num_requests, stall from checked
)

select
    b.deployment_id,
    b.kind,
    b.num_requests,
    b.checked,
    b.num_requests - b.checked as not_checked,
    coalesce(f.flagged, 0) as flagged
from by_kind as b
left join flagged as f on f.deployment_id = b.deployment_id and f.kind = b.kind
