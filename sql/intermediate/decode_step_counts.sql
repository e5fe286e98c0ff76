-- The decode-only steps that clean rounds name, counted by the batch bucket of the step
-- and the set of context buckets its rounds ran in (step_rounds.context_mask): what
-- bucket_evidence needs of the steps, at a grain that leaves the steps on the cluster.
-- Grain: one row per (deployment_id, batch_position, context_mask) with such steps;
-- batch_position is the batch bucket's position in the seed (batch_bucket_position).
select
    r.deployment_id,
    batch_bucket_position(s.batch_size) as batch_position,
    r.context_mask,
    count(*) as num_steps
from step_rounds as r
join steps as s on s.step_uid = r.step_uid
where s.num_prefill_tokens = 0
group by r.deployment_id, batch_bucket_position(s.batch_size), r.context_mask
