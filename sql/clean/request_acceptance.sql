-- Acceptance of each request, for the per-request (macro) averages and correlations.
-- Grain: one row per request (deployment_id, request_uid) that has at least one clean round.
-- materialized: table
select
    deployment_id,
    request_uid,
    any_value(request_id) as request_id,
    any_value(category) as category,
    count(*) as num_rounds,
    count(*) filter (where num_draft_tokens > 0) as num_spec_rounds,
    sum(num_accepted_tokens) as num_accepted_tokens,
    sum(num_committed_tokens) as num_committed_tokens,
    1 + sum(num_accepted_tokens) / nullif(count(*) filter (where num_draft_tokens > 0), 0) as accept_length
from round_facts
group by deployment_id, request_uid
