-- The rounds summed by everything a round's step and request say about it: the one
-- pass that joins every round to its step and its request.
-- Grain: one row per (deployment_id, batch_bucket, context_bucket, category,
-- has_step, decode_only, parts_overlap) that has rounds.
-- materialized: table
--
-- Timing parts are summed with their counts (avg = sum / count), so the views
-- that read these cells average exactly the rounds that know each part.
select
    deployment_id,
    batch_bucket,
    context_bucket,
    category,
    has_step,
    decode_only,
    parts_overlap,
    count(*) as num_rounds,
    count(*) filter (where num_draft_tokens > 0) as num_spec_rounds,
    sum(num_accepted_tokens) as num_accepted_tokens,
    sum(num_committed_tokens) as num_committed_tokens,
    min(batch_size) as min_batch_size,
    max(batch_size) as max_batch_size,
    count(duration_ms) as duration_n,
    sum(duration_ms) as duration_ms,
    count(draft_ms) as draft_n,
    sum(draft_ms) as draft_ms,
    count(verify_ms) as verify_n,
    sum(verify_ms) as verify_ms,
    count(other_ms) as other_n,
    sum(other_ms) as other_ms
from round_facts
group by all
