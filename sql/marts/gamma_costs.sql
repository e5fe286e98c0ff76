-- Measured round cost per speculation length: the decode-only steps whose requests
-- all proposed the same γ (cost_steps.gamma), per batch bucket. A step in which some
-- requests proposed γ and others nothing (cost_steps.partly_drafting: an n-gram
-- lookup without a match) is left out: it verified fewer tokens than a round at γ
-- in which every request drafts, which E[L](γ) describes. γ = 0 is the plain decode
-- steps, in which no request proposed.
-- Grain: one row per deployment_id, batch_bucket, context_bucket, gamma. context_bucket
-- null is every step of the batch bucket; a label, the steps of that context bucket
-- (cost_steps.context_bucket), for `specan recommend --by-context`.
--
-- round_ms is the mean round time as docs/metrics.md counts it: Σ over the rounds of
-- their step's duration / rounds, so a step weighs as many rounds as it holds.
-- step_ms is the plain mean over steps. The mean_tokens_verified* columns are step
-- means, for the fit's residual at this γ. Times are summed as exact DECIMAL
-- (exact_ms), so every run gives the same means.
with scoped as (
    -- each step counts toward every context ('all') and toward its own context bucket
    select *, 'all' as fit_context from cost_steps
    union all
    select *, context_bucket as fit_context from cost_steps where context_bucket is not null
)

select
    deployment_id,
    batch_bucket,
    batch_bucket_min(batch_bucket) as bucket_min,
    nullif(fit_context, 'all') as context_bucket,
    gamma,
    count(*) as steps,
    sum(num_rounds) as num_rounds,
    sum(num_rounds * exact_ms(duration_ms)) / sum(num_rounds) as round_ms,
    avg(exact_ms(duration_ms)) as step_ms,
    avg(exact_ms(draft_ms)) as draft_ms,
    avg(exact_ms(verify_ms)) as verify_ms,
    avg(batch_size) as mean_batch_size,
    min(batch_size) as min_batch_size,
    max(batch_size) as max_batch_size,
    avg(tokens_verified) as mean_tokens_verified,
    avg(tokens_verified * tokens_verified) as mean_tokens_verified_sq
from scoped
where gamma is not null and not partly_drafting
group by deployment_id, batch_bucket, fit_context, gamma
