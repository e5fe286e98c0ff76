-- Acceptance of each request, for the per-request (macro) averages and correlations.
-- Grain: one row per request (deployment_id, request_uid) that has at least one clean round.
-- partition: the request's partition values (request_partitions), which tell requests of
-- one id apart; null without a partitioned requests row.
select
    r.deployment_id,
    r.request_uid,
    r.request_id,
    p.partition,
    r.category,
    r.num_rounds,
    r.num_spec_rounds,
    r.num_accepted_tokens,
    r.num_committed_tokens,
    r.accept_length
from request_rounds as r
left join request_partitions as p on p.request_uid = r.request_uid
