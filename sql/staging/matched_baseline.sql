-- The matched non-speculative baseline of each deployment (docs/metrics.md).
-- Grain: one row per deployment_id.
--
-- Exactly one rule applies:
-- 1. baseline_id is set: it is the baseline if it names a clean `none`
--    deployment; otherwise there is none (rule 2 is not tried).
-- 2. baseline_id is null: the single `none` deployment with the same model and
--    target_quant, and the same gpu and tensor_parallel_size where both are set.
-- 3. otherwise there is none.
with candidates as (
    select d.deployment_id, b.deployment_id as candidate_id
    from deployments as d
    join deployments as b
        on b.method = 'none'
        and b.model = d.model
        and b.target_quant = d.target_quant
        and (d.gpu is null or b.gpu is null or d.gpu = b.gpu)
        and (d.tensor_parallel_size is null or b.tensor_parallel_size is null
             or d.tensor_parallel_size = b.tensor_parallel_size)
        and b.deployment_id <> d.deployment_id
    where d.baseline_id is null
),

implicit as (
    select deployment_id, count(*) as num_candidates, min(candidate_id) as candidate_id
    from candidates
    group by deployment_id
)

select
    d.deployment_id,
    d.method,
    case
        when d.method = 'none' then null
        when d.baseline_id is not null then explicit.deployment_id
        when i.num_candidates = 1 then i.candidate_id
    end as baseline_id,
    case
        when d.method = 'none' then 'plain decoding: this deployment is a baseline, not compared with one'
        when d.baseline_id is not null and explicit.deployment_id is null
            then 'baseline_id ' || d.baseline_id || ' does not name a clean deployment with method none'
        when d.baseline_id is not null then null
        when coalesce(i.num_candidates, 0) = 0
            then 'no baseline: no none deployment with model ' || d.model || ' and target_quant ' || d.target_quant
        when i.num_candidates > 1
            then 'no baseline: ' || i.num_candidates || ' none deployments match model ' || d.model
                 || ' and target_quant ' || d.target_quant || '; set baseline_id'
    end as baseline_note
from deployments as d
left join deployments as explicit
    on explicit.deployment_id = d.baseline_id and explicit.method = 'none'
left join implicit as i on i.deployment_id = d.deployment_id
