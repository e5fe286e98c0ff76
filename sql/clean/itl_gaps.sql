-- Streaming gaps: the time between consecutive emissions of a clean request.
-- An emission is the first token (first_token_time), then the end of each round
-- that committed tokens, in round_idx order. One round may emit several tokens
-- in one chunk: the gap is the pause a user sees. Emissions without a known
-- time (no clean step, or no first_token_time) are skipped.
-- Grain: one row per gap (request_uid, emission index > 0).
--
-- This is the definition, an ordered window over every round, for your own
-- queries. The report reads the same gaps from request_rounds (packed per-request
-- keys, no global sort) and request_gaps_unpacked; a test holds them equal.
with emissions as (
    select deployment_id, request_uid, -1 as round_idx, first_token_time as emitted_at
    from requests
    where first_token_time is not null
    union all
    select f.deployment_id, f.request_uid, f.round_idx, f.end_time as emitted_at
    from round_facts as f
    semi join requests as q on q.request_uid = f.request_uid
    where f.num_committed_tokens > 0 and f.end_time is not null
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
    date_diff('microsecond', previous_at, emitted_at) / 1000.0 as gap_ms
from ordered
where previous_at is not null
