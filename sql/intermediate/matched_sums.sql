-- A speculative deployment's units, matched with its baseline and summed exactly: what
-- the matched speedup, its tables and its interval add up (docs/metrics.md, "Speedup at
-- the load and context each step ran at").
-- Grain: one row per (basis, deployment_id, time_block, load, batch_bucket,
-- context_bucket, reason) of a speculative deployment with a matched baseline;
-- reason is null for the matched (covered) units.
--
-- A unit is matched where its load is (matched_weights.covered) and, when both sides'
-- steps have context lengths, its context per request lies in the baseline's range there
-- (else reason context_out_of_range). tokens, time_ms and tx = Σ tokens · X are exact
-- sums; the counterfactual time of a group, what plain decoding would have needed for its
-- tokens at its loads and contexts, is tokens · level_ms + κ · tx (matched_weights), so
-- every view over these rows computes it from them and adds in a fixed order.
-- min_context and max_context: the least and most context per request of its steps;
-- blocks: how many blocks of time the deployment's units of the basis fill.
with blocks as (
    select basis, deployment_id, max(time_block) as blocks
    from matched_units
    group by basis, deployment_id
)

select
    u.basis,
    u.deployment_id,
    w.baseline_id,
    u.time_block,
    u.load,
    u.batch_bucket,
    u.context_bucket,
    case
        when not w.covered then w.reason
        when w.context_known and not u.context_per_request between w.context_lo and w.context_hi
            then 'context_out_of_range'
    end as reason,
    count(*) as units,
    sum(u.tokens) as tokens,
    sum(u.time_ms) as time_ms,
    sum(u.tokens * u.context_tokens) as tx,
    min(u.context_per_request) as min_context,
    max(u.context_per_request) as max_context,
    k.blocks
from matched_units as u
join matched_weights as w on w.basis = u.basis and w.deployment_id = u.deployment_id and w.load = u.load
join blocks as k on k.basis = u.basis and k.deployment_id = u.deployment_id
group by all
