-- Everything the reports need from a request's rounds, from one pass over the rounds:
-- its acceptance sums, its streaming gaps, the integrity counts of its keys and the
-- buckets its decode rounds ran in.
-- Grain: one row per request (deployment_id, request_uid) that has at least one clean round.
--
-- Sums are integers summed once; ratios are formed in the views that read them.
-- The request labels (category, temperature_bucket, structured_output) belong to
-- the request, so they are joined to these rows after the pass, and any grouping
-- by them is a sum over these rows. The pass itself joins only the steps (for the
-- round's end time): a 50M-round pass pays for each join it makes.
--
-- Streaming gaps (docs/metrics.md: itl, max_stall) need each request's emissions in
-- round_idx order. An emission is the first token (first_token_time), then the end
-- of each round that committed tokens and has a clean step, for clean requests.
-- Instead of a window that sorts every round of the trace, each request packs
-- every round into one BIGINT and sorts its own short list:
--     key = round_idx · 2^43 + emits · 2^41 + (end_us mod 2^41)
-- Sorted keys run in round_idx order. The low 42 bits are less than half of 2^43,
-- so the difference of adjacent keys, d, tells how far round_idx moved,
-- round((d) / 2^43): 0 is the same round twice (duplicate_key). What remains of d
-- is the difference of the end times mod 2^41: the gap in µs (packed_key_gap_us).
-- That is exact while 0 ≤ round_idx < 2^20, the emissions span less than 2^40 µs
-- (12.7 days) and no round_idx repeats; a request outside those bounds has
-- packed = false and its gaps come from request_gaps_unpacked, an ordered window
-- over its rounds only.
--
-- The same sorted keys tell whether a request's step ends fall with round_idx
-- (has_round_out_of_order, the round_out_of_order rule counted for rounds read in
-- place): the gaps between adjacent emitting rounds, of every request, end_gaps_us.
--
-- Which small batch sizes a request's decode-only rounds with a clean step ran at, as a
-- bit mask: bit b − 1 for a decode step of batch size b ≤ 16 (decode_size_mask). Distinct
-- requests per batch size are not a sum over rounds, but a count of these rows
-- (batch_size_requests): a baseline's load cell below min_baseline_requests() requests
-- must hold that many distinct requests; a step of a larger batch holds as many itself.
--
-- request_group: the group of requests the bootstrap intervals resample together
-- (request_group_cells), a stable hash of the request's key (the macro request_group),
-- computed here once per request and the same on every engine. A request without a
-- requests row gets its group from its rounds' key by the same rule, without an arrival time.
with per_request as (
    select
        r.deployment_id,
        r.request_uid,
        min(r.request_id) as request_id,
        -- two request ids behind one 64-bit request_uid: a hash collision, or a written
        -- request_uid that is not valid (checked at load, with the id against the request's)
        min(r.request_id) <> max(r.request_id) as request_uid_collides,
        count(*) as num_rounds,
        count(*) filter (where r.num_draft_tokens > 0) as num_spec_rounds,
        sum(r.num_draft_tokens) as num_draft_tokens,
        sum(r.num_accepted_tokens) as num_accepted_tokens,
        sum(r.num_invalidated_tokens) as num_invalidated_tokens,
        sum(r.num_committed_tokens) as num_committed_tokens,
        sum(r.num_verified_nodes) as num_verified_nodes,
        -- counts are INTEGER columns: their sums with a constant or each other are BIGINT,
        -- which no count can overflow
        count(*) filter (where r.num_committed_tokens < cast(r.num_accepted_tokens as bigint) + 1) as truncated_rounds,
        coalesce(sum(cast(r.num_accepted_tokens as bigint) + 1 - r.num_committed_tokens)
            filter (where r.num_committed_tokens < cast(r.num_accepted_tokens as bigint) + 1), 0) as truncated_tokens,
        count(*) filter (where r.num_draft_tokens = 0 and r.num_invalidated_tokens > 0) as fully_invalidated_rounds,
        min(r.round_idx) as min_round_idx,
        max(r.round_idx) as max_round_idx,
        count(s.end_us) as timed_rounds,
        count(s.end_us) filter (where r.num_committed_tokens > 0) as emitting_rounds,
        min(s.end_us) filter (where r.num_committed_tokens > 0) as first_end_us,
        max(s.end_us) filter (where r.num_committed_tokens > 0) as last_end_us,
        bit_or(cast(1 as bigint) << (s.decode_small_batch - 1)) as decode_size_mask,
        list_sort(list(
            case
                -- out of range: the request is not packed, and its keys are never read
                when r.round_idx not between 0 and 1048575 then 0
                when r.num_committed_tokens > 0 and s.end_us is not null
                    then cast(r.round_idx as bigint) * 8796093022208 + 2199023255552
                         + (s.end_us % 2199023255552 + 2199023255552) % 2199023255552
                else cast(r.round_idx as bigint) * 8796093022208
            end
        )) as keys
    from rounds as r
    left join (
        select
            step_uid,
            epoch_us(step_end_time(start_time, duration_ms)) as end_us,
            -- a decode step's batch size when it is at most 16, for decode_size_mask
            case when num_prefill_tokens = 0 and batch_size between 1 and 16 then batch_size end as decode_small_batch
        from steps
    ) as s
        on s.step_uid = r.step_uid
    group by r.deployment_id, r.request_uid
),

labelled as materialized (
    select
        p.*,
        request_group(p.deployment_id, p.request_id, epoch_us(q.arrival_time)) as request_group,
        coalesce(q.category, 'unlabeled') as category,
        temperature_bucket(q.temperature) as temperature_bucket,
        coalesce(q.structured_output, false) as structured_output,
        q.request_uid is not null as has_request,
        epoch_us(q.first_token_time) as first_token_us,
        list_transform(range(2, array_length(p.keys) + 1), lambda i: p.keys[i] - p.keys[i - 1]) as key_steps
    from per_request as p
    left join requests as q on q.request_uid = p.request_uid
),

packed as (
    select
        *,
        case
            when cast(max_round_idx as bigint) - min_round_idx + 1 < num_rounds then true
            -- keys hold round_idx only within [0, 2^20): beyond, unknown here (the loader copies and checks)
            when min_round_idx < 0 or max_round_idx >= 1048576 then null
            else coalesce(list_min(key_steps) < 4398046511104, false)
        end as has_duplicate_round
    from labelled
),

gapped as (
    select
        *,
        min_round_idx >= 0 and max_round_idx < 1048576 and not coalesce(has_duplicate_round, true)
            and coalesce(last_end_us - first_end_us < 1099511627776, true) as packed,
        case
            when emitting_rounds = num_rounds then keys
            else list_filter(keys, lambda k: k % 8796093022208 >= 2199023255552)
        end as emitting_keys
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
    request_group,
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
    coalesce(decode_size_mask, 0) as decode_size_mask,
    1 + num_accepted_tokens / nullif(num_spec_rounds, 0) as accept_length,
    min_round_idx,
    max_round_idx,
    has_duplicate_round,
    has_round_out_of_order,
    request_uid_collides,
    packed,
    first_end_us,
    first_token_us,
    -- only for packed requests: see request_gaps_unpacked
    gaps_us,
    list_max(gaps_us) / 1000.0 as max_stall_ms
from (
    select
        *,
        case
            when not packed then null
            when not has_request then []
            else list_concat(packed_first_gap_us(emitting_keys, first_end_us, first_token_us), end_gaps_us)
        end as gaps_us,
        -- the round_out_of_order rule's count for rounds read in place (analyzer/ingest/rules.py):
        -- false only when the ends of the request's clean steps never fall with round_idx.
        -- Unknown (null) when the keys cannot tell: not packed, or a round with a clean step
        -- that commits nothing, whose end is not in the keys
        case
            when not packed or timed_rounds > emitting_rounds then null
            else coalesce(list_min(end_gaps_us) < 0, false)
        end as has_round_out_of_order
    from (
        select
            *,
            -- the gaps between the ends of adjacent emitting rounds, for every request
            case
                when not packed then null
                -- every round emits: the adjacent key differences
                when emitting_rounds = num_rounds then list_transform(key_steps, lambda d: packed_key_gap_us(d))
                else list_transform(range(2, array_length(emitting_keys) + 1),
                                    lambda i: packed_key_gap_us(emitting_keys[i] - emitting_keys[i - 1]))
            end as end_gaps_us
        from gapped
    )
)
