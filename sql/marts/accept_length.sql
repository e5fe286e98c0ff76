-- Acceptance per deployment: vLLM's mean accept length 1 + C/R, acceptance rate,
-- tokens per round (real progress per decode step), stop truncation, tree width.
-- Grain: one row per deployment_id (every clean deployment, even without rounds).
with per_request as (
    -- a DOUBLE mean, added in the order of its values: every run adds it alike, whatever
    -- the link keys (hashed or written) and however the requests were read
    select deployment_id, avg(accept_length order by accept_length) as mean_accept_length_per_request
    from request_acceptance
    where num_spec_rounds > 0
    group by deployment_id
),

totals as (
    select * exclude (grouping, group_value)
    from acceptance_totals
    where grouping = 'deployment'
)

select
    d.deployment_id,
    d.method,
    d.num_speculative_tokens,
    coalesce(t.num_rounds, 0) as num_rounds,
    coalesce(t.num_spec_rounds, 0) as num_spec_rounds,
    coalesce(t.num_draft_tokens, 0) as num_draft_tokens,
    coalesce(t.num_accepted_tokens, 0) as num_accepted_tokens,
    coalesce(t.num_invalidated_tokens, 0) as num_invalidated_tokens,
    coalesce(t.num_committed_tokens, 0) as num_committed_tokens,
    t.mean_accept_length,
    p.mean_accept_length_per_request,
    t.acceptance_rate,
    t.tokens_per_round,
    coalesce(t.truncated_rounds, 0) as truncated_rounds,
    coalesce(t.truncated_tokens, 0) as truncated_tokens,
    t.invalidation_rate,
    t.nodes_per_round,
    t.accepted_per_node,
    coalesce(t.num_requests, 0) as num_requests
from deployments as d
left join totals as t on t.deployment_id = d.deployment_id
left join per_request as p on p.deployment_id = d.deployment_id
