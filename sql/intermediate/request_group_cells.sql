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
-- It is a plain view: only the report's interval pass reads it.
with by_request as (
    -- a step's bucket is computed per step; the rounds are summed per request first,
    -- whose few rows per request then take the request's group
    select
        r.deployment_id,
        r.request_uid,
        s.decode_batch_bucket,
        count(*) filter (where r.num_draft_tokens > 0) as num_spec_rounds,
        sum(r.num_accepted_tokens) as num_accepted_tokens,
        sum(r.num_committed_tokens) as num_committed_tokens,
        sum(exact_ms(s.duration_ms)) as time_ms
    from rounds as r
    left join (
        select
            step_uid,
            duration_ms,
            case when num_prefill_tokens = 0 then batch_bucket(batch_size) end as decode_batch_bucket
        from steps
    ) as s
        on s.step_uid = r.step_uid
    group by r.deployment_id, r.request_uid, s.decode_batch_bucket
)

select
    b.deployment_id,
    q.request_group,
    b.decode_batch_bucket as batch_bucket,
    sum(b.num_spec_rounds) as num_spec_rounds,
    sum(b.num_accepted_tokens) as num_accepted_tokens,
    sum(b.num_committed_tokens) filter (where b.decode_batch_bucket is not null) as num_committed_tokens,
    sum(b.time_ms) filter (where b.decode_batch_bucket is not null) as time_ms
from by_request as b
join request_rounds as q on q.deployment_id = b.deployment_id and q.request_uid = b.request_uid
group by b.deployment_id, q.request_group, b.decode_batch_bucket
