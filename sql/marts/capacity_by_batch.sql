-- Absolute throughput per batch bucket, to plan capacity with: tokens committed per
-- second of busy time (the summed durations of the bucket's clean steps), the same per
-- GPU (÷ deployments.tensor_parallel_size; null when it is unknown), and the share of
-- the deployment's busy time spent in the bucket.
-- Grain: one row per deployment_id, batch_bucket (with clean steps that have a duration).
--
-- Every step counts, prefill steps too: busy time is busy time. A step's tokens are its
-- rounds' or, in a deployment without rounds, its own (iteration_steps). Durations are summed
-- as exact DECIMAL (exact_ms), so the sums are the same in any order.
with per_step as (
    select
        s.deployment_id,
        batch_bucket(s.batch_size) as batch_bucket,
        exact_ms(s.duration_ms) as duration_ms,
        -- from the step's rounds, or the step's own counts in a deployment without rounds
        coalesce(r.num_committed_tokens, i.num_committed_tokens, 0) as committed_tokens
    from steps as s
    left join step_rounds as r on r.step_uid = s.step_uid
    left join iteration_steps as i on i.step_uid = s.step_uid
    where s.duration_ms is not null
),

buckets as (
    select
        deployment_id,
        batch_bucket,
        count(*) as num_steps,
        sum(duration_ms) as busy_ms,
        sum(committed_tokens) as num_committed_tokens
    from per_step
    group by deployment_id, batch_bucket
)

select
    b.deployment_id,
    b.batch_bucket,
    batch_bucket_min(b.batch_bucket) as bucket_min,
    b.num_steps,
    cast(b.busy_ms as double) / 1000 as busy_s,
    b.num_committed_tokens,
    b.num_committed_tokens / nullif(cast(b.busy_ms as double) / 1000, 0) as output_tokens_per_busy_s,
    d.tensor_parallel_size as num_gpus,
    b.num_committed_tokens / nullif(cast(b.busy_ms as double) / 1000, 0) / d.tensor_parallel_size
        as output_tokens_per_gpu_s,
    cast(b.busy_ms as double) / nullif(cast(sum(b.busy_ms) over (partition by b.deployment_id) as double), 0)
        as time_share
from buckets as b
join deployments as d on d.deployment_id = b.deployment_id
