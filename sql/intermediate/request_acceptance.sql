-- Acceptance of each request, for the per-request (macro) averages and correlations.
-- Grain: one row per request (deployment_id, request_uid) that has at least one clean round.
select
    deployment_id,
    request_uid,
    request_id,
    category,
    num_rounds,
    num_spec_rounds,
    num_accepted_tokens,
    num_committed_tokens,
    accept_length
from request_rounds
