-- Speedup per slice (report --by COLUMN): Σ_b t0(b) · committed(b, slice) / Σ_b time(b, slice)
-- over the slice's decode-only rounds that have a clean step. As for the categories
-- (category_speedup), t0(b) is the deployment's matched t0 in bucket b (baseline_t0:
-- the baseline's time per token at the batch sizes and contexts its steps there ran
-- at): batch size and context, not the slice, set the cost of a step. A bucket's t0
-- stands for all of the slice's rounds there, matched steps or not, so where a bucket is
-- partly matched (baseline_t0.matched_share < 1) this is an approximation.
-- Grain: one row per (deployment_id, slice_column, slice_value) with such rounds;
-- a null slice_value is a slice of its own.
with by_bucket as (
    select
        q.deployment_id,
        q.slice_column,
        q.slice_value,
        d.batch_bucket,
        sum(d.num_committed_tokens) as num_committed_tokens,
        sum(d.time_ms) as time_ms
    from slice_requests as q
    join request_decode_buckets as d on d.request_uid = q.request_uid
    group by q.deployment_id, q.slice_column, q.slice_value, d.batch_bucket
)

select
    b.deployment_id,
    b.slice_column,
    b.slice_value,
    -- a DOUBLE sum, added in bucket order so that every run adds it alike
    sum(t.t0_ms * b.num_committed_tokens order by b.batch_bucket)
        / nullif(sum(b.time_ms) filter (where t.t0_ms is not null), 0) as speedup,
    sum(b.num_committed_tokens) filter (where t.t0_ms is not null) / sum(b.num_committed_tokens)
        as speedup_coverage
from by_bucket as b
left join baseline_t0 as t
    on t.deployment_id = b.deployment_id
    and t.batch_bucket = b.batch_bucket
    and t.context_bucket is null
group by b.deployment_id, b.slice_column, b.slice_value
