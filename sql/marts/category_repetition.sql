-- Repetition structure per task category, and how well it explains acceptance:
-- mean repeat_ratio(n) and prompt_copy_ratio over requests, their quartiles, and the
-- Pearson correlation across requests of repeat_ratio with the request's accept length.
-- Grain: one row per deployment_id, category (of requests).
--
-- Requests without token ids are counted (requests_without_tokens) and left out;
-- so are requests with no eligible position (output shorter than n with no prompt).
with analysed as (
    select
        r.deployment_id,
        r.category,
        r.request_uid,
        r.output_len,
        r.repeat_n,
        r.repeat_ratio,
        r.prompt_copy_ratio,
        a.accept_length
    from request_repetition as r
    left join request_acceptance as a on a.request_uid = r.request_uid
    where r.repeat_ratio is not null
),

by_category as (
    select
        deployment_id,
        category,
        count(*) as num_requests,
        sum(output_len) as output_tokens,
        any_value(repeat_n) as repeat_n,
        -- DOUBLE means and correlation, added in the order of their values: every run adds them
        -- alike, whatever the link keys (hashed or written) and however the requests were read
        avg(repeat_ratio order by repeat_ratio) as repeat_ratio,
        avg(prompt_copy_ratio order by prompt_copy_ratio) as prompt_copy_ratio,
        corr(repeat_ratio, accept_length order by repeat_ratio, accept_length) as repeat_accept_correlation,
        count(accept_length) as correlated_requests,
        quantile_cont(repeat_ratio, [0.25, 0.5, 0.75]) as quartiles
    from analysed
    group by deployment_id, category
),

coverage as (
    select
        deployment_id,
        category,
        count(*) as requests_in_category,
        count(*) filter (where prompt_token_ids is null or output_token_ids is null) as requests_without_tokens
    from requests
    group by deployment_id, category
)

select
    c.deployment_id,
    c.category,
    coalesce(b.num_requests, 0) as num_requests,
    coalesce(b.output_tokens, 0) as output_tokens,
    coalesce(b.repeat_n, repeat_n()) as repeat_n,
    b.repeat_ratio,
    b.prompt_copy_ratio,
    b.repeat_accept_correlation,
    coalesce(b.correlated_requests, 0) as correlated_requests,
    b.quartiles[1] as repeat_ratio_q1,
    b.quartiles[2] as repeat_ratio_median,
    b.quartiles[3] as repeat_ratio_q3,
    c.requests_without_tokens
from coverage as c
left join by_category as b on b.deployment_id = c.deployment_id and b.category = c.category
