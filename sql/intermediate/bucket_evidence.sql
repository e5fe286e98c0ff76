-- What a bucket's decode time per token rests on: the decode-only steps with a clean
-- step and the distinct requests behind each deployment's decode_totals sums, per batch
-- bucket and per (batch bucket, context bucket). baseline_t0 reads a baseline's counts
-- against the [evidence] floors.
-- Grain: one row per (deployment_id, batch_bucket, context_bucket) with such rounds;
-- context_bucket is null for the batch bucket over every context.
--
-- num_steps counts the steps of the bucket (by their batch_size) that clean rounds name;
-- in a (batch, context) cell, the steps with a round of that context (decode_step_counts).
-- num_requests counts the requests with a decode-only round with a clean step there, read
-- off the bucket bits of request_rounds: a request's set of buckets is no sum over its
-- rounds, its bits are. Both read per-step and per-request tables, never the rounds.
with positions as (
    -- every batch bucket, alone (context_position null) and with each context bucket
    select
        b.position as batch_position,
        b.label as batch_bucket,
        c.position as context_position,
        c.label as context_bucket,
        batch_context_cell(b.position, cast(c.lowest as bigint)) as cell
    from buckets as b
    cross join (
        select position, label, lowest from buckets where kind = 'context' and position > 0
        union all
        select null, null, null
    ) as c
    where b.kind = 'batch' and b.position > 0
),

step_counts as (
    select
        d.deployment_id,
        p.batch_bucket,
        p.context_bucket,
        cast(sum(d.num_steps) as bigint) as num_steps
    from decode_step_counts as d
    join positions as p
        on p.batch_position = d.batch_position
        and (p.context_position is null or d.context_mask & (cast(1 as bigint) << (p.context_position - 1)) <> 0)
    group by d.deployment_id, p.batch_bucket, p.context_bucket
),

request_counts as (
    select
        r.deployment_id,
        p.batch_bucket,
        p.context_bucket,
        count(*) as num_requests
    from request_rounds as r
    join positions as p
        on case
            when p.context_position is null
                then r.decode_batch_mask & (cast(1 as bigint) << (p.batch_position - 1)) <> 0
            when p.cell < 63 then r.decode_cell_mask_low & (cast(1 as bigint) << p.cell) <> 0
            else r.decode_cell_mask_high & (cast(1 as bigint) << (p.cell - 63)) <> 0
        end
    group by r.deployment_id, p.batch_bucket, p.context_bucket
)

select
    coalesce(s.deployment_id, q.deployment_id) as deployment_id,
    coalesce(s.batch_bucket, q.batch_bucket) as batch_bucket,
    coalesce(s.context_bucket, q.context_bucket) as context_bucket,
    coalesce(s.num_steps, 0) as num_steps,
    coalesce(q.num_requests, 0) as num_requests
from step_counts as s
full join request_counts as q
    on q.deployment_id = s.deployment_id
    and q.batch_bucket = s.batch_bucket
    and q.context_bucket is not distinct from s.context_bucket
