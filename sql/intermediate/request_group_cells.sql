-- The rounds summed per group of requests, for the intervals of the headline numbers
-- (headline_intervals): each request falls in one of 64 groups by its request_uid (a
-- hash, so the groups are random subsets of the requests), and resampling the groups
-- resamples the requests with every round of a request kept together. request_uid is
-- each engine's own 64-bit hash (signed on Spark, hence the double modulo), so another
-- engine draws other groups: an equally valid resample, not the same one. A group from
-- md5(request_id), the same everywhere, was measured at 7-21 s against 3 s per 50M
-- rounds.
-- Grain: one row per (deployment_id, request_group, batch_bucket) with rounds;
-- batch_bucket is null for the rounds of no decode-only step.
--
-- Acceptance sums count every clean round; committed tokens and time (the speedup's
-- C and T) count the decode-only rounds with a clean step, as decode_totals does.
-- It is a plain view: only the report's interval pass reads it.
with by_size as (
    -- grouped by the raw batch size first: integers hash faster than labels
    select
        r.deployment_id,
        (r.request_uid % 64 + 64) % 64 as request_group,
        case when s.num_prefill_tokens = 0 then s.batch_size end as decode_batch_size,
        count(*) filter (where r.num_draft_tokens > 0) as num_spec_rounds,
        sum(r.num_accepted_tokens) as num_accepted_tokens,
        sum(r.num_committed_tokens) as num_committed_tokens,
        sum(exact_ms(s.duration_ms)) as time_ms
    from rounds as r
    left join steps as s on s.step_uid = r.step_uid
    group by all
)

select
    deployment_id,
    request_group,
    batch_bucket(decode_batch_size) as batch_bucket,
    sum(num_spec_rounds) as num_spec_rounds,
    sum(num_accepted_tokens) as num_accepted_tokens,
    sum(num_committed_tokens) filter (where decode_batch_size is not null) as num_committed_tokens,
    sum(time_ms) filter (where decode_batch_size is not null) as time_ms
from by_size
group by all
