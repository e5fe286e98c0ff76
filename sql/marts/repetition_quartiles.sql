-- The spread inside a category: acceptance by repeat_ratio quartile of its requests,
-- so a reader sees that repetition, not the label, drives the result.
-- Grain: one row per deployment_id, category, quartile (1 = least repetitive).
with ranked as (
    select
        r.deployment_id,
        r.category,
        r.repeat_ratio,
        a.num_rounds,
        a.num_spec_rounds,
        a.num_accepted_tokens,
        a.num_committed_tokens,
        -- ties are broken by md5(request_id), a pseudo-random order that does not depend on
        -- how the uids were hashed (DuckDB or Spark), then by every column summed below:
        -- requests that tie on all of them are interchangeable
        ntile(4) over (partition by r.deployment_id, r.category
                       order by r.repeat_ratio, md5(r.request_id), a.num_rounds, a.num_spec_rounds,
                                a.num_accepted_tokens, a.num_committed_tokens)
            as quartile
    from request_repetition as r
    join request_acceptance as a on a.request_uid = r.request_uid
    where r.repeat_ratio is not null
)

select
    deployment_id,
    category,
    quartile,
    count(*) as num_requests,
    min(repeat_ratio) as repeat_ratio_min,
    max(repeat_ratio) as repeat_ratio_max,
    1 + sum(num_accepted_tokens) / nullif(sum(num_spec_rounds), 0) as mean_accept_length,
    sum(num_committed_tokens) / sum(num_rounds) as tokens_per_round
from ranked
group by deployment_id, category, quartile
