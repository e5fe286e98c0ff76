-- The rounds of each step, summed: what the round-cost fit and the KV share need.
-- Grain: one row per (deployment_id, step_uid) that some clean round names.
--
-- It reads the rounds alone: a step's own columns are joined afterwards to these
-- far fewer rows (cost_steps, capacity). proposed = num_draft_tokens +
-- num_invalidated_tokens, the drafts a round paid for (see cost_steps).
select
    deployment_id,
    step_uid,
    count(*) as num_rounds,
    -- BIGINT before adding: no sum of two INTEGER counts overflows
    sum(cast(coalesce(num_verified_nodes, num_draft_tokens) as bigint) + 1) as tokens_verified,
    sum(num_draft_tokens) as num_draft_tokens,
    sum(num_committed_tokens) as num_committed_tokens,
    sum(coalesce(num_verified_nodes, num_draft_tokens)) as num_verified_nodes,
    sum(coalesce(num_invalidated_tokens, 0)) as num_invalidated_tokens,
    min(cast(num_draft_tokens as bigint) + coalesce(num_invalidated_tokens, 0)) as min_proposed,
    max(cast(num_draft_tokens as bigint) + coalesce(num_invalidated_tokens, 0)) as max_proposed,
    -- the fewest drafts a round that proposed any proposed: rounds that proposed none
    -- (no n-gram match, speculation off) are no speculation length (cost_steps)
    min(nullif(cast(num_draft_tokens as bigint) + coalesce(num_invalidated_tokens, 0), 0)) as min_positive_proposed,
    min(num_draft_tokens) as min_drafted,
    max(num_draft_tokens) as max_drafted,
    -- the context its rounds attend to: a step's context bucket is that of their mean
    sum(context_len) as context_tokens,
    count(context_len) as context_rounds,
    -- the context buckets its rounds ran in, bit p − 1 for context bucket position p: a
    -- step stands behind the t0 of every (batch, context) cell it has rounds in (bucket_evidence)
    coalesce(bit_or(cast(1 as bigint) << (context_bucket_position(context_len) - 1)), 0) as context_mask,
    -- two step ids behind one 64-bit step_uid: a hash collision, or a written step_uid
    -- that is not valid (checked at load, with the step id against the step's)
    min(step_id) as step_id,
    min(step_id) <> max(step_id) as step_uid_collides
from rounds
where step_uid is not null
group by deployment_id, step_uid
