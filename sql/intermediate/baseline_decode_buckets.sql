-- What a prediction of turning speculation on for a baseline rests on (`specan
-- replay-ngram`): each `none` deployment's decode-only rounds that have a clean step,
-- per batch bucket, with the decode steps and the requests behind them (the
-- [evidence] floors of a t0), its plain round time and the batch size a round sees.
-- Grain: one row per (deployment_id, batch_bucket) of a deployment with method none
-- that has such rounds.
--
-- t0_ms = time / committed tokens, as baseline_t0 computes it for the deployments
-- that this baseline is matched to; round_ms = time / rounds, the plain decode round
-- time (the same when every round commits one token). round_mean_batch_size is
-- Σ rounds·B / Σ rounds over the bucket's steps, the batch size at which cost_model's
-- fits are evaluated. decode_requests counts distinct requests with such rounds: a
-- pass over the baselines' rounds, so this is a plain view that only replay-ngram reads.
with baselines as (
    select deployment_id
    from deployments
    where method = 'none'
),

decode_steps as (
    select
        r.deployment_id,
        batch_bucket(s.batch_size) as batch_bucket,
        count(*) as decode_steps,
        sum(r.num_rounds * s.batch_size) / sum(r.num_rounds) as round_mean_batch_size
    from step_rounds as r
    join steps as s on s.step_uid = r.step_uid
    join baselines as b on b.deployment_id = r.deployment_id
    where s.num_prefill_tokens = 0
    group by r.deployment_id, batch_bucket(s.batch_size)
),

request_sizes as (
    -- grouped by the raw batch size first: integers hash faster than labels
    select distinct
        r.deployment_id,
        s.batch_size,
        r.request_uid
    from rounds as r
    join steps as s on s.step_uid = r.step_uid
    join baselines as b on b.deployment_id = r.deployment_id
    where s.num_prefill_tokens = 0
),

decode_requests as (
    select
        deployment_id,
        batch_bucket(batch_size) as batch_bucket,
        count(distinct request_uid) as decode_requests
    from request_sizes
    group by deployment_id, batch_bucket(batch_size)
)

select
    t.deployment_id,
    t.batch_bucket,
    batch_bucket_min(t.batch_bucket) as bucket_min,
    s.decode_steps,
    q.decode_requests,
    t.num_rounds,
    t.num_committed_tokens,
    t.time_ms,
    t.time_ms / nullif(t.num_committed_tokens, 0) as t0_ms,
    t.time_ms / t.num_rounds as round_ms,
    s.round_mean_batch_size
from decode_totals as t
join baselines as b on b.deployment_id = t.deployment_id
join decode_steps as s on s.deployment_id = t.deployment_id and s.batch_bucket = t.batch_bucket
join decode_requests as q on q.deployment_id = t.deployment_id and q.batch_bucket = t.batch_bucket
where t.grouping = 'batch'
