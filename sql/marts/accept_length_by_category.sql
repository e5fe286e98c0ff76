-- Acceptance and speedup per task category.
-- Grain: one row per deployment_id, category (categories with at least one clean round).
select
    a.deployment_id,
    a.group_value as category,
    num_requests,
    num_rounds,
    num_spec_rounds,
    num_draft_tokens,
    num_accepted_tokens,
    num_invalidated_tokens,
    num_committed_tokens,
    mean_accept_length,
    acceptance_rate,
    tokens_per_round,
    truncated_rounds,
    truncated_tokens,
    invalidation_rate,
    s.speedup,
    s.speedup_coverage
from acceptance_totals as a
left join category_speedup as s
    on s.deployment_id = a.deployment_id and s.category = a.group_value
where a.grouping = 'category'
