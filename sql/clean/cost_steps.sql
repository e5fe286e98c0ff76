-- The decode steps that the round-cost fit reads: per step, the tokens it verified,
-- its batch size, its time and the speculation length its requests proposed.
-- Grain: one row per step (deployment_id, step_uid) of a speculative deployment
-- (method not none) that has a clean step and prefilled nothing (decode_only).
--
-- tokens_verified = Σ (coalesce(num_verified_nodes, num_draft_tokens) + 1) over the
-- step's rounds: the positions the target scores (X of the fit).
-- gamma: the speculation length the step ran at. It is the common number of drafts
-- proposed, num_draft_tokens + num_invalidated_tokens, when every round of the step
-- proposed the same number, else null (a mixed step, which counts toward the fit
-- only). Proposed, not verified: a round whose grammar cut drafts still paid for
-- drafting them, so it is no measurement of the shorter length. Without grammar
-- cuts it equals drafted_gamma, the common num_draft_tokens.
with per_step as (
    select
        r.deployment_id,
        r.step_uid,
        count(*) as num_rounds,
        sum(coalesce(r.num_verified_nodes, r.num_draft_tokens) + 1) as tokens_verified,
        sum(r.num_draft_tokens) as num_draft_tokens,
        sum(coalesce(r.num_verified_nodes, r.num_draft_tokens)) as num_verified_nodes,
        sum(coalesce(r.num_invalidated_tokens, 0)) as num_invalidated_tokens,
        min(r.num_draft_tokens + coalesce(r.num_invalidated_tokens, 0)) as min_proposed,
        max(r.num_draft_tokens + coalesce(r.num_invalidated_tokens, 0)) as max_proposed,
        min(r.num_draft_tokens) as min_drafted,
        max(r.num_draft_tokens) as max_drafted,
        any_value(r.batch_size) as batch_size,
        any_value(r.batch_bucket) as batch_bucket,
        any_value(r.duration_ms) as duration_ms,
        any_value(r.draft_ms) as draft_ms,
        any_value(r.verify_ms) as verify_ms,
        any_value(r.other_ms) as other_ms
    from round_facts as r
    join deployments as d on d.deployment_id = r.deployment_id
    where r.has_step and r.decode_only and d.method <> 'none'
    group by r.deployment_id, r.step_uid
)

select
    deployment_id,
    step_uid,
    batch_size,
    batch_bucket,
    num_rounds,
    tokens_verified,
    num_draft_tokens,
    num_verified_nodes,
    num_invalidated_tokens,
    case when min_proposed = max_proposed then min_proposed end as gamma,
    case when min_drafted = max_drafted then min_drafted end as drafted_gamma,
    duration_ms,
    draft_ms,
    verify_ms,
    other_ms
from per_step
