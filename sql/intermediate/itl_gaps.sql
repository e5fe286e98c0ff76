-- Streaming gaps: the time between consecutive emissions of a clean request
-- (stream_emissions), in round_idx order: the pause a user sees.
-- Grain: one row per gap (request_uid, emission index > 0).
--
-- This is the definition, an ordered window over every emission, for your own
-- queries. The report reads the same gaps from request_rounds (packed per-request
-- keys, no global sort) and request_gaps_unpacked; a test holds them equal.
with ordered as (
    select
        deployment_id,
        request_uid,
        round_idx,
        emitted_at,
        lag(emitted_at) over (partition by request_uid order by round_idx) as previous_at
    from stream_emissions
)

select
    deployment_id,
    request_uid,
    round_idx,
    date_diff('microsecond', previous_at, emitted_at) / 1000.0 as gap_ms
from ordered
where previous_at is not null
