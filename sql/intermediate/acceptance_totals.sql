-- Acceptance sums for every grouping the reports use.
-- Grain: one row per (grouping, deployment_id, group_value); grouping is one of
-- deployment, category, temperature_bucket, structured_output.
--
-- Every label here belongs to a request, so each group is a sum over request_rounds
-- (one row per request), and num_requests counts its rows.
-- Every ratio is a ratio of sums (docs/metrics.md): C = Σ accepted over speculative
-- rounds, which equals Σ accepted over all rounds because accepted ≤ drafted.
with grouped as (
    select
        case
            -- one column per grouping() call: Spark's takes one, DuckDB's several as a bit vector
            when grouping(category) = 1 and grouping(temperature_bucket) = 1 and grouping(structured_output) = 1
                then 'deployment'
            when grouping(category) = 0 then 'category'
            when grouping(temperature_bucket) = 0 then 'temperature_bucket'
            else 'structured_output'
        end as grouping,
        deployment_id,
        coalesce(category, temperature_bucket, cast(structured_output as varchar)) as group_value,
        sum(num_rounds) as num_rounds,
        sum(num_spec_rounds) as num_spec_rounds,
        sum(num_draft_tokens) as num_draft_tokens,
        sum(num_accepted_tokens) as num_accepted_tokens,
        sum(num_invalidated_tokens) as num_invalidated_tokens,
        sum(num_committed_tokens) as num_committed_tokens,
        sum(truncated_rounds) as truncated_rounds,
        sum(truncated_tokens) as truncated_tokens,
        sum(num_verified_nodes) as num_verified_nodes,
        sum(fully_invalidated_rounds) as fully_invalidated_rounds,
        count(*) as num_requests
    from request_rounds
    group by grouping sets (
        (deployment_id),
        (deployment_id, category),
        (deployment_id, temperature_bucket),
        (deployment_id, structured_output)
    )
)

select
    grouping,
    deployment_id,
    group_value,
    num_rounds,
    num_spec_rounds,
    num_draft_tokens,
    num_accepted_tokens,
    num_invalidated_tokens,
    num_committed_tokens,
    1 + num_accepted_tokens / nullif(num_spec_rounds, 0) as mean_accept_length,
    num_accepted_tokens / nullif(num_draft_tokens, 0) as acceptance_rate,
    num_committed_tokens / nullif(num_rounds, 0) as tokens_per_round,
    truncated_rounds,
    truncated_tokens,
    num_invalidated_tokens / nullif(num_draft_tokens + num_invalidated_tokens, 0) as invalidation_rate,
    num_verified_nodes / nullif(num_spec_rounds, 0) as nodes_per_round,
    num_accepted_tokens / nullif(num_verified_nodes, 0) as accepted_per_node,
    fully_invalidated_rounds,
    num_requests
from grouped
