-- The decode steps that the round-cost fit reads: per step, the tokens it verified,
-- its batch size, its time and the speculation length its requests proposed.
-- Grain: one row per step (deployment_id, step_uid) of a speculative deployment
-- (method not none) that has a clean step and prefilled nothing (decode_only).
--
-- tokens_verified = Σ (coalesce(num_verified_nodes, num_draft_tokens) + 1) over the
-- step's rounds: the positions the target scores (X of the fit).
-- gamma: the speculation length the step ran at. It is the common number of drafts
-- proposed, num_draft_tokens + num_invalidated_tokens, by the rounds of the step
-- that proposed any, else null (a mixed step, which counts toward the fit only).
-- A round that proposed none (an n-gram lookup that found no match, or speculation
-- switched off) is a plain decode round, not a speculation length: an ngram step
-- whose requests proposed 4 or nothing ran at γ = 4 (partly_drafting). A step none
-- of whose rounds proposed is a plain decode step, gamma 0: it costs what a round
-- at γ = 0 costs, whichever reason switched drafting off. Proposed, not verified:
-- a round whose grammar cut drafts still paid for drafting them, so it is no
-- measurement of the shorter length. Without grammar cuts or rounds that proposed
-- none it equals drafted_gamma, the common num_draft_tokens.
-- partly_drafting: some rounds of the step proposed drafts and others none. The
-- step verified fewer tokens than a step at its γ whose every request drafts, so
-- its time is no measured round time at γ (gamma_costs leaves it out); its X is
-- what it verified, so the fit reads it like any step.
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
    case
        when max_proposed = 0 then 0
        when min_positive_proposed = max_proposed then max_proposed
    end as gamma,
    min_proposed = 0 and max_proposed > 0 as partly_drafting,
    case when min_drafted = max_drafted then min_drafted end as drafted_gamma,
    duration_ms,
    draft_ms,
    verify_ms,
    other_ms
from per_step
