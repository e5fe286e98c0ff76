-- What the report says of output_tokens_mismatch: per deployment with any, how many of
-- its checked requests disagree, and the first mismatch_examples() request keys in key
-- order. A scale-out engine brings back these rows, not one per mismatched request.
-- Grain: one row per (deployment_id, example), example 1 … mismatch_examples().
with ranked as (
    select
        deployment_id,
        request_key,
        checked_requests,
        count(*) over (partition by deployment_id) as mismatched_requests,
        row_number() over (partition by deployment_id order by request_key) as example
    from output_tokens_mismatch
)

select deployment_id, example, request_key, mismatched_requests, checked_requests
from ranked
where example <= mismatch_examples()
