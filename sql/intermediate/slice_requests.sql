-- Every request with a clean round under each --by column, with its value there and
-- its acceptance sums: what the slice views (report --by COLUMN) group.
-- Grain: one row per (slice_column, deployment_id, request_uid) of request_rounds.
--
-- slice_columns and request_slices are not files here: specan creates them at run
-- time from the requests columns the user names (analyzer/analysis/slices.py), empty
-- when none is named. A request with no requests row (it was rejected, or there is
-- no requests table) has no value: it joins the null slice, as a null value does, so
-- each column's slices add up to the deployment, as the categories do ('unlabeled').
with by_column as (
    select
        r.deployment_id,
        r.request_uid,
        c.slice_column,
        r.num_rounds,
        r.num_spec_rounds,
        r.num_draft_tokens,
        r.num_accepted_tokens,
        r.num_invalidated_tokens,
        r.num_committed_tokens
    from request_rounds as r
    cross join slice_columns as c
)

select
    b.slice_column,
    b.deployment_id,
    b.request_uid,
    s.slice_value,
    b.num_rounds,
    b.num_spec_rounds,
    b.num_draft_tokens,
    b.num_accepted_tokens,
    b.num_invalidated_tokens,
    b.num_committed_tokens
from by_column as b
left join request_slices as s
    on s.request_uid = b.request_uid and s.slice_column = b.slice_column
