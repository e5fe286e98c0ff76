-- Acceptance per sampling-temperature bucket: 0, (0,0.5], (0.5,1], >1, unknown.
-- Grain: one row per deployment_id, temperature_bucket (buckets with at least one clean round).
select
    deployment_id,
    group_value as temperature_bucket,
    num_requests,
    num_rounds,
    num_spec_rounds,
    num_draft_tokens,
    num_accepted_tokens,
    num_committed_tokens,
    mean_accept_length,
    acceptance_rate,
    tokens_per_round
from acceptance_totals
where grouping = 'temperature_bucket'
