-- The one pass over the rounds joined to their steps and their requests: the rounds
-- summed by request group and by everything a round's step, context and request say
-- about it.
-- Grain: one row per (deployment_id, request_group, category, request_partition, has_step,
-- batch_position, decode_only, parts_overlap, context_kib, d, k) that has clean rounds.
--
-- round_cells (per bucket and category), request_group_cells (per request group and
-- batch bucket, for the bootstrap) and round_histogram (per context bucket, d and k)
-- are regroupings of these rows, so the rounds are read and joined once for the three
-- (docs/performance.md, "After issue 26: one pass"). request_rounds, the other pass,
-- groups by request: a request's packed keys are a list per request, which costs more
-- split over these cells than in a pass of its own (measured there).
--
-- A step's part is computed per step: batch_position is its batch bucket's position
-- (batch_bucket(min_batch_size) is the label: every batch size of a row is in that
-- bucket), decode_only that it prefilled nothing. context_kib is the context length in
-- whole KiB, capped at 32: every context bucket boundary is a whole KiB, so
-- context_bucket(context_kib * 1024) is the rounds' bucket, and integers group faster
-- than labels. d and k are the round's drafted and accepted tokens (round_histogram).
-- A round's request group is its request's (the macro request_group, the same rule as
-- request_rounds), joined per round from the requests, never hashed per round, except
-- for a round whose request has no row: then from its own key, without an arrival time.
--
-- request_partition is the request's partition values as text (request_partitions:
-- 'date=2026-11-28'; null when the requests are not partitioned or the round's request
-- has no row). No view reads it: it keeps a partition's rounds in rows of their own, so
-- that the cache of the passes can split this one pass into the trace units it keeps
-- (analyzer/analysis/pass_cache.py) instead of running it once per unit.
--
-- Time sums are DECIMAL (exact_ms), exact in any order: parallel threads add the
-- rounds in a different order in every run, and a DOUBLE sum would differ in its
-- last digits.
with step_parts as (
    select
        step_uid,
        batch_size,
        batch_bucket_position(batch_size) as batch_position,
        num_prefill_tokens = 0 as decode_only,
        -- other is unknown when a part is unknown or when the parts overlap
        -- (asynchronous drafting): then draft + verify exceeds the step (round_facts)
        draft_ms + verify_ms > duration_ms as parts_overlap,
        duration_ms,
        draft_ms,
        verify_ms,
        case
            when draft_ms + verify_ms <= duration_ms then duration_ms - draft_ms - verify_ms
        end as other_ms
    from steps
),

request_labels as (
    select
        q.request_uid,
        request_group(q.deployment_id, q.request_id, epoch_us(q.arrival_time)) as request_group,
        coalesce(q.category, 'unlabeled') as category,
        p.partition as request_partition
    from requests as q
    left join request_partitions as p
        on p.request_uid = q.request_uid
),

labelled_rounds as (
    select
        r.deployment_id,
        coalesce(q.request_group, request_group(r.deployment_id, r.request_id, null)) as request_group,
        coalesce(q.category, 'unlabeled') as category,
        q.request_partition,
        s.step_uid is not null as has_step,
        s.batch_position,
        s.decode_only,
        s.parts_overlap,
        -- a case, not least(): least() skips a null, and a round without a context has none
        case when r.context_len >= 32768 then 32 else r.context_len // 1024 end as context_kib,
        r.num_draft_tokens as d,
        r.num_accepted_tokens as k,
        r.num_committed_tokens,
        s.batch_size,
        s.duration_ms,
        s.draft_ms,
        s.verify_ms,
        s.other_ms
    from rounds as r
    left join step_parts as s
        on s.step_uid = r.step_uid
    left join request_labels as q
        on q.request_uid = r.request_uid
)

select
    deployment_id,
    request_group,
    category,
    request_partition,
    has_step,
    batch_position,
    decode_only,
    parts_overlap,
    context_kib,
    d,
    k,
    count(*) as num_rounds,
    sum(num_committed_tokens) as num_committed_tokens,
    min(batch_size) as min_batch_size,
    max(batch_size) as max_batch_size,
    count(duration_ms) as duration_n,
    sum(exact_ms(duration_ms)) as duration_ms,
    count(draft_ms) as draft_n,
    sum(exact_ms(draft_ms)) as draft_ms,
    count(verify_ms) as verify_n,
    sum(exact_ms(verify_ms)) as verify_ms,
    count(other_ms) as other_n,
    sum(exact_ms(other_ms)) as other_ms
from labelled_rounds
-- every column before the counts
group by all
