-- Streaming gaps of the requests whose rounds could not be packed into one sortable
-- BIGINT (request_rounds.packed = false: a round_idx outside [0, 2^20) or emissions
-- spanning 12.7 days or more), by an ordered window over those requests' rounds only.
-- Usually no request qualifies, and then the rounds are not read at all.
-- Grain: one row per gap (request_uid, emission index > 0) of an unpacked request.
-- materialized: table
--
-- An emission is the first token (first_token_time), then the end of each round
-- that committed tokens, in round_idx order, for clean requests (as in request_rounds).
with unpacked as (
    select request_uid
    from request_rounds
    where not packed
),

emissions as (
    select q.deployment_id, q.request_uid, -1 as round_idx, q.first_token_time as emitted_at
    from requests as q
    semi join unpacked as u on u.request_uid = q.request_uid
    where q.first_token_time is not null
    union all
    select f.deployment_id, f.request_uid, f.round_idx, f.end_time as emitted_at
    from round_facts as f
    semi join unpacked as u on u.request_uid = f.request_uid
    where f.has_request and f.num_committed_tokens > 0 and f.end_time is not null
),

ordered as (
    select
        deployment_id,
        request_uid,
        round_idx,
        emitted_at,
        lag(emitted_at) over (partition by request_uid order by round_idx) as previous_at
    from emissions
)

select
    deployment_id,
    request_uid,
    round_idx,
    date_diff('microsecond', previous_at, emitted_at) as gap_us,
    date_diff('microsecond', previous_at, emitted_at) / 1000.0 as gap_ms
from ordered
where previous_at is not null
