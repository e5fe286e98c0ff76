-- Drafts that structured output (a grammar) cut off before verification.
-- Grain: one row per deployment_id, structured_output.
select
    deployment_id,
    group_value = 'true' as structured_output,
    num_rounds,
    num_draft_tokens + num_invalidated_tokens as proposed_tokens,
    num_invalidated_tokens as invalidated_tokens,
    invalidation_rate,
    mean_accept_length,
    fully_invalidated_rounds
from acceptance_totals
where grouping = 'structured_output'
