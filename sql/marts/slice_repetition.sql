-- Repetition per slice (report --by COLUMN), as category_repetition per category: the
-- mean repeat_ratio over the slice's requests and the Pearson correlation r, across
-- them, of repeat_ratio with the request's accept length.
-- Grain: one row per (deployment_id, slice_column, slice_value) with a request that
-- has a repeat_ratio; a null slice_value is a slice of its own.
with analysed as (
    select
        s.deployment_id,
        s.slice_column,
        s.slice_value,
        r.request_uid,
        r.repeat_ratio,
        a.accept_length
    from request_slices as s
    join request_repetition as r on r.request_uid = s.request_uid
    left join request_acceptance as a on a.request_uid = s.request_uid
    where r.repeat_ratio is not null
)

select
    deployment_id,
    slice_column,
    slice_value,
    count(*) as num_requests,
    -- DOUBLE mean and correlation, added in request order so that every run adds them alike
    avg(repeat_ratio order by repeat_ratio) as repeat_ratio,
    corr(repeat_ratio, accept_length order by repeat_ratio, accept_length) as repeat_accept_correlation,
    count(accept_length) as correlated_requests
from analysed
group by deployment_id, slice_column, slice_value
