-- The rounds summed per group of requests, for the intervals of the headline numbers
-- (headline_intervals): each request falls in one of 256 groups (request_rounds.request_group,
-- a stable hash of its key: random subsets of the requests, the same on every engine),
-- and resampling the groups resamples the requests with every round of a request kept
-- together. A round gets its group through its request, never from a hash per round.
-- Grain: one row per (deployment_id, request_group, batch_bucket) with rounds;
-- batch_bucket is null for the rounds of no decode-only step.
--
-- Acceptance sums count every clean round; committed tokens and time (the speedup's
-- C and T) count the decode-only rounds with a clean step, as decode_totals does.
-- A regrouping of round_group_cells (the one pass that joins the rounds to their
-- steps and requests); a plain view: only the report's interval pass reads it.
with by_bucket as (
    select
        deployment_id,
        request_group,
        -- every batch size of a round_group_cells row is in the bucket of its position
        case when decode_only then batch_bucket(min_batch_size) end as batch_bucket,
        d,
        k,
        num_rounds,
        num_committed_tokens,
        duration_ms
    from round_group_cells
)

select
    deployment_id,
    request_group,
    batch_bucket,
    coalesce(sum(num_rounds) filter (where d > 0), 0) as num_spec_rounds,
    sum(k * num_rounds) as num_accepted_tokens,
    sum(num_committed_tokens) filter (where batch_bucket is not null) as num_committed_tokens,
    sum(duration_ms) filter (where batch_bucket is not null) as time_ms
from by_bucket
group by deployment_id, request_group, batch_bucket
