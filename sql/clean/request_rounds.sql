-- Everything the reports need from a request's rounds, from one pass over the rounds:
-- its acceptance sums, its streaming gaps and the integrity counts of its keys.
-- Grain: one row per request (deployment_id, request_uid) that has at least one clean round.
-- materialized: table
--
-- Sums are integers summed once; ratios are formed in the views that read them.
-- The request labels (category, temperature_bucket, structured_output) belong to
-- the request, so any grouping by them is a sum over these rows.
--
-- Streaming gaps (metrics.md: itl, max_stall) need each request's emissions in
-- round_idx order. An emission is the first token (first_token_time), then the end
-- of each round that committed tokens and has a clean step, for clean requests.
-- Instead of a window that sorts every round of the trace, each request packs
-- every round into one BIGINT and sorts its own short list:
--     key = round_idx · 2^42 + emits · 2^41 + (end_us mod 2^41)
-- Sorted keys run in round_idx order, so adjacent equal round_idx are duplicate
-- keys; emission_keys keeps the emitting rounds' keys, from which the gaps in µs
-- are differences of the low 41 bits taken mod 2^41 (the packed_gaps_us macro).
-- That is exact while 0 ≤ round_idx < 2^20 and the request's emissions span less
-- than 2^40 µs (12.7 days); a request outside those bounds has packed = false and
-- its gaps come from request_gaps_unpacked, an ordered window over its rounds only.
with per_request as (
    select
        deployment_id,
        request_uid,
        any_value(request_id) as request_id,
        any_value(category) as category,
        any_value(temperature_bucket) as temperature_bucket,
        any_value(structured_output) as structured_output,
        bool_or(has_request) as has_request,
        any_value(first_token_time) as first_token_time,
        count(*) as num_rounds,
        count(*) filter (where num_draft_tokens > 0) as num_spec_rounds,
        sum(num_draft_tokens) as num_draft_tokens,
        sum(num_accepted_tokens) as num_accepted_tokens,
        sum(num_invalidated_tokens) as num_invalidated_tokens,
        sum(num_committed_tokens) as num_committed_tokens,
        sum(num_verified_nodes) as num_verified_nodes,
        count(*) filter (where num_committed_tokens < num_accepted_tokens + 1) as truncated_rounds,
        coalesce(sum(num_accepted_tokens + 1 - num_committed_tokens)
            filter (where num_committed_tokens < num_accepted_tokens + 1), 0) as truncated_tokens,
        count(*) filter (where num_draft_tokens = 0 and num_invalidated_tokens > 0) as fully_invalidated_rounds,
        min(round_idx) as min_round_idx,
        max(round_idx) as max_round_idx,
        min(epoch_us(end_time)) filter (where has_request and num_committed_tokens > 0) as first_end_us,
        max(epoch_us(end_time)) filter (where has_request and num_committed_tokens > 0) as last_end_us,
        list(
            cast(round_idx as bigint) * 4398046511104
            + case
                when has_request and num_committed_tokens > 0 and end_time is not null
                    then 2199023255552 + (epoch_us(end_time) % 2199023255552 + 2199023255552) % 2199023255552
                else 0
            end
        ) as keys
    from round_facts
    group by deployment_id, request_uid
),

packed as (
    select
        * exclude (keys),
        min_round_idx >= 0 and max_round_idx < 1048576
            and coalesce(last_end_us - first_end_us < 1099511627776, true) as packed,
        list_sort(keys) as keys
    from per_request
),

emissions as (
    select
        * exclude (keys),
        -- adjacent keys with the same round_idx: the same round twice
        len(list_filter(range(2, len(keys) + 1), lambda i: keys[i] // 4398046511104 = keys[i - 1] // 4398046511104))
            as duplicate_rounds,
        list_filter(keys, lambda k: k % 4398046511104 >= 2199023255552) as emission_keys,
        epoch_us(first_token_time) as first_token_us
    from packed
)

select
    deployment_id,
    request_uid,
    request_id,
    category,
    temperature_bucket,
    structured_output,
    has_request,
    num_rounds,
    num_spec_rounds,
    num_draft_tokens,
    num_accepted_tokens,
    num_invalidated_tokens,
    num_committed_tokens,
    num_verified_nodes,
    truncated_rounds,
    truncated_tokens,
    fully_invalidated_rounds,
    1 + num_accepted_tokens / nullif(num_spec_rounds, 0) as accept_length,
    min_round_idx,
    max_round_idx,
    duplicate_rounds,
    packed,
    first_end_us,
    first_token_us,
    -- only for packed requests: see request_gaps_unpacked
    case when packed then emission_keys end as emission_keys,
    case when packed then list_max(packed_gaps_us(emission_keys, first_end_us, first_token_us)) / 1000.0 end
        as max_stall_ms
from emissions
