-- The round-cost model's data per batch bucket: sufficient statistics of the
-- least-squares fit T = α + β_tokens·X + β_batch·B (+ q·X²) over decode-only steps
-- (cost_steps), X = tokens_verified, B = batch_size, T = duration_ms.
-- Grain: one row per deployment_id, batch_bucket, context_bucket. context_bucket null
-- is the fit over every step of the batch bucket; a label is the fit restricted to
-- the steps of that context bucket (cost_steps.context_bucket), for `specan
-- recommend --by-context`.
--
-- The sums are of deviations from the bucket means (x = X − mean_x, b = B − mean_b,
-- y = T − mean_y), which keeps the normal equations well conditioned; sxxy is
-- Σ x²·y and so on. analyzer.tuning.round_cost_fits solves them. gammas lists the
-- speculation lengths (> 0) the bucket's steps ran at (cost_steps.gamma); mixed_steps
-- counts the steps whose drafting requests proposed different numbers, plain_steps
-- those in which no request proposed (gamma 0), partial_steps those at a γ in which
-- some requests proposed nothing (cost_steps.partly_drafting).
-- round_mean_batch_size is the batch size a round sees on average (Σ rounds·B / Σ
-- rounds), where a fitted round time is evaluated. nodes_per_draft is Σ verified
-- nodes / Σ drafts (1 for chains, more for trees).
--
-- The sums are exact, so every run gives the same fit (a DOUBLE sum depends on
-- the order parallel threads add the steps in). X and B are integers and T is
-- summed as DECIMAL (exact_ms), so sums about origins near the means, x0 =
-- round(mean_x), b0 = round(mean_b), y0 = mean_y to the ns, are integer sums,
-- exact in any order. The sums about the means follow once per bucket, in
-- DOUBLE, by the shift formulas: u = X − x0 has mean du = mean_x − x0, and
-- Σ (u − du)² = Σ u² − n·du², and so on. |du|, |db| ≤ 1/2: the shift costs
-- next to no precision.
with scoped as (
    -- each step counts twice: toward its batch bucket's fit over every context
    -- ('all') and toward the fit of its own context bucket
    select *, 'all' as fit_context from cost_steps
    union all
    select *, context_bucket as fit_context from cost_steps where context_bucket is not null
),

means as (
    select
        deployment_id,
        batch_bucket,
        fit_context,
        count(*) as n_steps,
        avg(tokens_verified) as mean_x,
        avg(batch_size) as mean_b,
        avg(exact_ms(duration_ms)) as mean_y,
        cast(round(avg(tokens_verified)) as hugeint) as x0,
        cast(round(avg(batch_size)) as hugeint) as b0,
        exact_ms(avg(exact_ms(duration_ms))) as y0
    from scoped
    group by deployment_id, batch_bucket, fit_context
),

shifted as (
    select
        s.deployment_id,
        s.batch_bucket,
        s.fit_context,
        s.tokens_verified,
        s.batch_size,
        s.num_rounds,
        s.num_draft_tokens,
        s.num_verified_nodes,
        s.gamma,
        s.partly_drafting,
        s.tokens_verified - m.x0 as x,
        s.batch_size - m.b0 as b,
        exact_ms(s.duration_ms) - m.y0 as y
    from scoped as s
    join means as m
        on m.deployment_id = s.deployment_id
        and m.batch_bucket = s.batch_bucket
        and m.fit_context = s.fit_context
),

raw_sums as (
    select
        deployment_id,
        batch_bucket,
        fit_context,
        sum(num_rounds) as num_rounds,
        count(*) filter (where gamma is null) as mixed_steps,
        count(*) filter (where gamma = 0) as plain_steps,
        count(*) filter (where gamma > 0 and partly_drafting) as partial_steps,
        list(distinct gamma order by gamma) filter (where gamma > 0) as gammas,
        count(distinct tokens_verified) as distinct_tokens,
        count(distinct batch_size) as distinct_batch_sizes,
        min(tokens_verified) as min_tokens,
        max(tokens_verified) as max_tokens,
        min(batch_size) as min_batch_size,
        max(batch_size) as max_batch_size,
        sum(num_rounds * batch_size) / sum(num_rounds) as round_mean_batch_size,
        sum(num_verified_nodes) / nullif(sum(num_draft_tokens), 0) as nodes_per_draft,
        -- exact: HUGEINT and DECIMAL sums
        cast(sum(x * x) as double) as uu,
        cast(sum(x * b) as double) as ub,
        cast(sum(b * b) as double) as bb,
        cast(sum(x * x * x) as double) as uuu,
        cast(sum(x * x * x * x) as double) as uuuu,
        cast(sum(x * x * b) as double) as uub,
        cast(sum(y * y) as double) as yy,
        cast(sum(x * y) as double) as uy,
        cast(sum(b * y) as double) as by_,
        cast(sum(x * x * y) as double) as uuy
    from shifted
    group by deployment_id, batch_bucket, fit_context
),

sums as (
    -- the shift formulas, with du, db, dy the means of the shifted u, b, y
    select
        r.*,
        r.uu - n * du * du as sxx,
        r.ub - n * du * db as sxb,
        r.bb - n * db * db as sbb,
        r.uuu - 3 * du * r.uu + 2 * n * du * du * du as sxxx,
        r.uuuu - 4 * du * r.uuu + 6 * du * du * r.uu - 3 * n * du * du * du * du as sxxxx,
        r.uub - db * r.uu - 2 * du * r.ub + 2 * n * du * du * db as sxxb,
        r.yy - n * dy * dy as syy,
        r.uy - n * du * dy as sxy,
        r.by_ - n * db * dy as sby,
        r.uuy - dy * r.uu - 2 * du * r.uy + 2 * n * du * du * dy as sxxy
    from raw_sums as r
    join (
        select
            deployment_id,
            batch_bucket,
            fit_context,
            cast(n_steps as double) as n,
            mean_x - cast(x0 as double) as du,
            mean_b - cast(b0 as double) as db,
            mean_y - cast(y0 as double) as dy
        from means
    ) as d
        on d.deployment_id = r.deployment_id
        and d.batch_bucket = r.batch_bucket
        and d.fit_context = r.fit_context
)

select
    m.deployment_id,
    m.batch_bucket,
    batch_bucket_min(m.batch_bucket) as bucket_min,
    nullif(m.fit_context, 'all') as context_bucket,
    m.n_steps,
    s.num_rounds,
    s.mixed_steps,
    s.plain_steps,
    s.partial_steps,
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
join sums as s
    on s.deployment_id = m.deployment_id
    and s.batch_bucket = m.batch_bucket
    and s.fit_context = m.fit_context
