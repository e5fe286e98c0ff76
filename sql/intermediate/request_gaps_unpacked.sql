-- Streaming gaps of the requests whose rounds could not be packed into one sortable
-- BIGINT (request_rounds.packed = false: a round_idx outside [0, 2^20), a repeated
-- round_idx, or emissions spanning 12.7 days or more), by an ordered window over
-- those requests' emissions only (itl_gaps, restricted before the window).
-- Usually no request qualifies, and then the rounds are not read at all.
-- Grain: one row per gap (request_uid, emission index > 0) of an unpacked request.
with unpacked as (
    select request_uid
    from request_rounds
    where not packed
),

ordered as (
    select
        e.deployment_id,
        e.request_uid,
        e.round_idx,
        e.emitted_at,
        lag(e.emitted_at) over (partition by e.request_uid order by e.round_idx) as previous_at
    from stream_emissions as e
    semi join unpacked as u on u.request_uid = e.request_uid
)

select
    deployment_id,
    request_uid,
    round_idx,
    date_diff('microsecond', previous_at, emitted_at) as gap_us,
    date_diff('microsecond', previous_at, emitted_at) / 1000.0 as gap_ms
from ordered
where previous_at is not null
