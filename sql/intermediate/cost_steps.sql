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
-- context_bucket: the bucket of the mean context_len of the step's rounds (null when
-- none has one), so that a fit can be restricted to the steps of one context bucket.
with per_step as (
    select
        r.*,
        s.batch_size,
        s.duration_ms,
        s.draft_ms,
        s.verify_ms,
        case when s.draft_ms + s.verify_ms <= s.duration_ms then s.duration_ms - s.draft_ms - s.verify_ms end
            as other_ms
    from step_rounds as r
    join steps as s on s.step_uid = r.step_uid
    join deployments as d on d.deployment_id = r.deployment_id
    where s.num_prefill_tokens = 0 and d.method <> 'none'
)

select
    deployment_id,
    step_uid,
    batch_size,
    batch_bucket(batch_size) as batch_bucket,
    context_bucket(context_tokens // nullif(context_rounds, 0)) as context_bucket,
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
