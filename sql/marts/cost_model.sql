-- The round-cost model's data per batch bucket: sufficient statistics of the
-- least-squares fit T = α + β_tokens·X + β_batch·B (+ q·X²) over decode-only steps
-- (cost_steps), X = tokens_verified, B = batch_size, T = duration_ms.
-- Grain: one row per deployment_id, batch_bucket.
--
-- The sums are of deviations from the bucket means (x = X − mean_x, b = B − mean_b,
-- y = T − mean_y), which keeps the normal equations well conditioned; sxxy is
-- Σ x²·y and so on. analyzer.tuning.round_cost_fits solves them. gammas lists the
-- speculation lengths of the bucket's uniform-γ steps; mixed_steps counts the others.
-- round_mean_batch_size is the batch size a round sees on average (Σ rounds·B / Σ
-- rounds), where a fitted round time is evaluated. nodes_per_draft is Σ verified
-- nodes / Σ drafts (1 for chains, more for trees).
with means as (
    select
        deployment_id,
        batch_bucket,
        count(*) as n_steps,
        avg(tokens_verified) as mean_x,
        avg(batch_size) as mean_b,
        avg(duration_ms) as mean_y
    from cost_steps
    group by deployment_id, batch_bucket
),

centered as (
    select
        s.deployment_id,
        s.batch_bucket,
        s.tokens_verified,
        s.batch_size,
        s.num_rounds,
        s.num_draft_tokens,
        s.num_verified_nodes,
        s.gamma,
        s.tokens_verified - m.mean_x as x,
        s.batch_size - m.mean_b as b,
        s.duration_ms - m.mean_y as y
    from cost_steps as s
    join means as m on m.deployment_id = s.deployment_id and m.batch_bucket = s.batch_bucket
),

sums as (
    select
        deployment_id,
        batch_bucket,
        sum(num_rounds) as num_rounds,
        count(*) filter (where gamma is null) as mixed_steps,
        list(distinct gamma order by gamma) filter (where gamma is not null) as gammas,
        count(distinct tokens_verified) as distinct_tokens,
        count(distinct batch_size) as distinct_batch_sizes,
        min(tokens_verified) as min_tokens,
        max(tokens_verified) as max_tokens,
        min(batch_size) as min_batch_size,
        max(batch_size) as max_batch_size,
        sum(num_rounds * batch_size) / sum(num_rounds) as round_mean_batch_size,
        sum(num_verified_nodes) / nullif(sum(num_draft_tokens), 0) as nodes_per_draft,
        sum(x * x) as sxx,
        sum(x * b) as sxb,
        sum(b * b) as sbb,
        sum(x * x * x) as sxxx,
        sum(x * x * x * x) as sxxxx,
        sum(x * x * b) as sxxb,
        sum(y * y) as syy,
        sum(x * y) as sxy,
        sum(b * y) as sby,
        sum(x * x * y) as sxxy
    from centered
    group by deployment_id, batch_bucket
)

select
    m.deployment_id,
    m.batch_bucket,
    batch_bucket_min(m.batch_bucket) as bucket_min,
    m.n_steps,
    s.num_rounds,
    s.mixed_steps,
    coalesce(s.gammas, []) as gammas,
    s.distinct_tokens,
    s.distinct_batch_sizes,
    s.min_tokens,
    s.max_tokens,
    s.min_batch_size,
    s.max_batch_size,
    m.mean_x,
    m.mean_b,
    m.mean_y,
    s.round_mean_batch_size,
    s.nodes_per_draft,
    s.sxx,
    s.sxb,
    s.sbb,
    s.sxxx,
    s.sxxxx,
    s.sxxb,
    s.syy,
    s.sxy,
    s.sby,
    s.sxxy
from means as m
join sums as s on s.deployment_id = m.deployment_id and s.batch_bucket = m.batch_bucket
