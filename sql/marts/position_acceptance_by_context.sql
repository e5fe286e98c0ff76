-- Per draft position i within each context bucket (rounds.context_len; 1k = 1024):
-- survival Pr(K ≥ i | drafted i) and conditional acceptance a_i, as position_acceptance
-- defines them. `specan recommend --by-context` builds E[L](γ) of a bucket from these.
-- Grain: one row per deployment_id, context_bucket, position.
select
    deployment_id,
    context_bucket,
    context_bucket_min(context_bucket) as bucket_min,
    position,
    drafted,
    accepted,
    accepted / nullif(drafted, 0) as survival,
    accepted / nullif(reached, 0) as conditional
from position_counts
where context_bucket is not null
