-- Streaming gaps: the time between consecutive emissions of a clean request.
-- An emission is the first token (first_token_time), then the end of each round
-- that committed tokens, in round_idx order. One round may emit several tokens
-- in one chunk: the gap is the pause a user sees. Emissions without a known
-- time (no clean step, or no first_token_time) are skipped.
-- Grain: one row per gap (request_uid, emission index > 0), in no particular order.
--
-- request_rounds computes the gaps of each request in its one pass over the
-- rounds; request_gaps_unpacked those of the few requests it cannot pack.
select
    deployment_id,
    request_uid,
    unnest(packed_gap_rounds(emission_keys, first_token_us)) as round_idx,
    unnest(gaps_us) / 1000.0 as gap_ms
from request_rounds
where packed
union all
select deployment_id, request_uid, round_idx, gap_ms
from request_gaps_unpacked
