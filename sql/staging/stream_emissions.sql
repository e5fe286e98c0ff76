-- What a streaming client receives, and when: the first token (first_token_time),
-- then the end of each round that committed tokens, for clean requests. One round
-- may emit several tokens in one chunk. Emissions without a known time (no clean
-- step, or no first_token_time) are left out.
-- Grain: one row per emission (request_uid, round_idx); the first token has round_idx -1.
select deployment_id, request_uid, -1 as round_idx, first_token_time as emitted_at
from requests
where first_token_time is not null
union all
select f.deployment_id, f.request_uid, f.round_idx, f.end_time as emitted_at
from round_facts as f
where f.has_request and f.num_committed_tokens > 0 and f.end_time is not null
