-- Acceptance, speedup and repetition per slice of a requests column (report --by COLUMN),
-- defined as for the categories (accept_length_by_category, category_repetition).
-- Grain: one row per (deployment_id, slice_column, slice_value) with at least one
-- clean round; a null slice_value is a slice of its own. Empty unless specan was given
-- --by (report, sql, load): the columns are in slice_columns.
--
-- Every ratio is a ratio of sums over the slice's requests (docs/metrics.md).
with acceptance as (
    select
        deployment_id,
        slice_column,
        slice_value,
        count(*) as num_requests,
        sum(num_rounds) as num_rounds,
        sum(num_spec_rounds) as num_spec_rounds,
        sum(num_draft_tokens) as num_draft_tokens,
        sum(num_accepted_tokens) as num_accepted_tokens,
        sum(num_invalidated_tokens) as num_invalidated_tokens,
        sum(num_committed_tokens) as num_committed_tokens
    from slice_requests
    group by deployment_id, slice_column, slice_value
)

select
    a.deployment_id,
    a.slice_column,
    a.slice_value,
    a.num_requests,
    a.num_rounds,
    a.num_spec_rounds,
    a.num_draft_tokens,
    a.num_accepted_tokens,
    a.num_invalidated_tokens,
    a.num_committed_tokens,
    1 + a.num_accepted_tokens / nullif(a.num_spec_rounds, 0) as mean_accept_length,
    a.num_accepted_tokens / nullif(a.num_draft_tokens, 0) as acceptance_rate,
    a.num_committed_tokens / nullif(a.num_rounds, 0) as tokens_per_round,
    s.speedup,
    s.speedup_coverage,
    r.repeat_ratio,
    r.repeat_accept_correlation,
    coalesce(r.num_requests, 0) as repetition_requests
from acceptance as a
left join slice_speedup as s
    on s.deployment_id = a.deployment_id
    and s.slice_column = a.slice_column
    and s.slice_value is not distinct from a.slice_value
left join slice_repetition as r
    on r.deployment_id = a.deployment_id
    and r.slice_column = a.slice_column
    and r.slice_value is not distinct from a.slice_value
