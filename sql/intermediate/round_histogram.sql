-- How many speculative rounds drafted d tokens and accepted k of them.
-- Grain: one row per (deployment_id, d, k) with at least one round that drafted (d > 0).
--
-- Per-position survival and conditional acceptance are sums over this histogram,
-- so the rounds are read once whatever γ is.
select deployment_id, num_draft_tokens as d, num_accepted_tokens as k, count(*) as n
from rounds
where num_draft_tokens > 0
group by all
