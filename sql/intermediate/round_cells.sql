-- The rounds summed by everything a round's step and request say about it: the one
-- pass that joins every round to its step and its request.
-- Grain: one row per (deployment_id, batch_bucket, context_bucket, category,
-- has_step, decode_only, parts_overlap) that has rounds.
--
-- Timing parts are summed with their counts (avg = sum / count), so the views
-- that read these cells average exactly the rounds that know each part. The
-- time sums are DECIMAL (exact_ms), exact in any order: parallel threads add
-- the rounds in a different order in every run, and a DOUBLE sum would differ
-- in its last digits.
with by_size as (
    -- grouped by the raw batch size and context length in KiB first: integers hash
    -- faster than labels, and every context bucket boundary is a whole KiB
    select
        deployment_id,
        batch_size,
        -- a case, not least(): least() skips a null, and a round without a context has none
        case when context_len >= 32768 then 32 else context_len // 1024 end as context_kib,
        category,
        has_step,
        decode_only,
        parts_overlap,
        count(*) as num_rounds,
        count(*) filter (where num_draft_tokens > 0) as num_spec_rounds,
        sum(num_accepted_tokens) as num_accepted_tokens,
        sum(num_committed_tokens) as num_committed_tokens,
        count(duration_ms) as duration_n,
        sum(exact_ms(duration_ms)) as duration_ms,
        count(draft_ms) as draft_n,
        sum(exact_ms(draft_ms)) as draft_ms,
        count(verify_ms) as verify_n,
        sum(exact_ms(verify_ms)) as verify_ms,
        count(other_ms) as other_n,
        sum(exact_ms(other_ms)) as other_ms
    from round_facts
    group by all
)

select
    deployment_id,
    batch_bucket(batch_size) as batch_bucket,
    context_bucket(context_kib * 1024) as context_bucket,
    category,
    has_step,
    decode_only,
    parts_overlap,
    sum(num_rounds) as num_rounds,
    sum(num_spec_rounds) as num_spec_rounds,
    sum(num_accepted_tokens) as num_accepted_tokens,
    sum(num_committed_tokens) as num_committed_tokens,
    min(batch_size) as min_batch_size,
    max(batch_size) as max_batch_size,
    sum(duration_n) as duration_n,
    sum(duration_ms) as duration_ms,
    sum(draft_n) as draft_n,
    sum(draft_ms) as draft_ms,
    sum(verify_n) as verify_n,
    sum(verify_ms) as verify_ms,
    sum(other_n) as other_n,
    sum(other_ms) as other_ms
from by_size
group by all
