-- How many speculative rounds drafted d tokens and accepted k of them, per context bucket.
-- Grain: one row per (deployment_id, context_bucket, d, k) with at least one round that
-- drafted (d > 0); context_bucket is null for rounds without a context_len.
--
-- Per-position survival and conditional acceptance are sums over this histogram,
-- so the rounds are read once whatever γ is, for the whole deployment and for each
-- context bucket alike.
with by_kib as (
    -- grouped by the context length in KiB first: integers hash faster than labels,
    -- and every context bucket boundary is a whole KiB
    select
        deployment_id,
        -- a case, not least(): least() skips a null, and a round without a context has none
        case when context_len >= 32768 then 32 else context_len // 1024 end as context_kib,
        num_draft_tokens as d,
        num_accepted_tokens as k,
        count(*) as n
    from rounds
    where num_draft_tokens > 0
    group by all
)

select deployment_id, context_bucket(context_kib * 1024) as context_bucket, d, k, sum(n) as n
from by_kib
group by all
