-- The rounds summed per group of requests, for the interval of the mean accept length
-- (headline_intervals): each request falls in one of 256 groups (request_rounds.request_group,
-- a stable hash of its key: random subsets of the requests, the same on every engine),
-- and resampling the groups resamples the requests with every round of a request kept
-- together. A round gets its group through its request, never from a hash per round.
-- Grain: one row per (deployment_id, request_group) with rounds.
--
-- Acceptance sums count every clean round. A regrouping of round_group_cells (the one
-- pass that joins the rounds to their steps and requests); a plain view: only the
-- report's interval pass reads it.
select
    deployment_id,
    request_group,
    coalesce(sum(num_rounds) filter (where d > 0), 0) as num_spec_rounds,
    sum(k * num_rounds) as num_accepted_tokens
from round_group_cells
group by deployment_id, request_group
