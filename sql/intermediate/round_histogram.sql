-- How many speculative rounds drafted d tokens and accepted k of them, per context bucket.
-- Grain: one row per (deployment_id, context_bucket, d, k) with at least one round that
-- drafted (d > 0); context_bucket is null for rounds without a context_len.
--
-- Per-position survival and conditional acceptance are sums over this histogram,
-- so the rounds are read once whatever γ is, for the whole deployment and for each
-- context bucket alike. A regrouping of round_group_cells, the one pass over the rounds.
select
    deployment_id,
    context_bucket(context_kib * 1024) as context_bucket,
    d,
    k,
    sum(num_rounds) as n
from round_group_cells
where d > 0
group by deployment_id, context_bucket(context_kib * 1024), d, k
