-- The rounds summed by everything a round's step and request say about it.
-- Grain: one row per (deployment_id, batch_bucket, context_bucket, category,
-- has_step, decode_only, parts_overlap) that has rounds.
--
-- A regrouping of round_group_cells, the one pass that joins every round to its step
-- and its request, over its request groups and its drafted and accepted counts.
--
-- Timing parts are summed with their counts (avg = sum / count), so the views
-- that read these cells average exactly the rounds that know each part. The
-- time sums are DECIMAL (exact_ms), exact in any order.
select
    deployment_id,
    -- every batch size of a round_group_cells row is in the bucket of its position
    batch_bucket(min_batch_size) as batch_bucket,
    context_bucket(context_kib * 1024) as context_bucket,
    category,
    has_step,
    decode_only,
    parts_overlap,
    sum(num_rounds) as num_rounds,
    coalesce(sum(num_rounds) filter (where d > 0), 0) as num_spec_rounds,
    sum(k * num_rounds) as num_accepted_tokens,
    sum(num_committed_tokens) as num_committed_tokens,
    min(min_batch_size) as min_batch_size,
    max(max_batch_size) as max_batch_size,
    sum(duration_n) as duration_n,
    sum(duration_ms) as duration_ms,
    sum(draft_n) as draft_n,
    sum(draft_ms) as draft_ms,
    sum(verify_n) as verify_n,
    sum(verify_ms) as verify_ms,
    sum(other_n) as other_n,
    sum(other_ms) as other_ms
from round_group_cells
group by
    deployment_id,
    batch_bucket(min_batch_size),
    context_bucket(context_kib * 1024),
    category,
    has_step,
    decode_only,
    parts_overlap
