-- Speedup from request timings alone, for traces without steps (docs/importers.md):
-- tpot_speedup = [Σ_B (finish − first token) / Σ_B (output_tokens − 1)]
--              / [Σ_D (finish − first token) / Σ_D (output_tokens − 1)],
-- over requests with output_tokens > 1 and both times. It is not matched on batch
-- size: the load of D and its baseline B may differ. tpot_speedup_coverage is the share
-- of D's output tokens after the first (Σ output_tokens − 1 over its requests with more
-- than one) in the requests it counts: the verdict decides on it only with enough.
-- Grain: one row per deployment_id.
with per_token as (
    select
        deployment_id,
        timed_duration_us / 1000.0 / timed_tokens as tpot_ms,
        timed_requests as num_requests,
        timed_tokens / tokens_after_first as timed_token_share
    from request_totals
)

select
    m.deployment_id,
    m.baseline_id,
    d.tpot_ms,
    b.tpot_ms as baseline_tpot_ms,
    b.tpot_ms / nullif(d.tpot_ms, 0) as tpot_speedup,
    case when b.tpot_ms / nullif(d.tpot_ms, 0) is not null then d.timed_token_share end as tpot_speedup_coverage,
    coalesce(d.num_requests, 0) as num_requests
from matched_baseline as m
left join per_token as d on d.deployment_id = m.deployment_id
left join per_token as b on b.deployment_id = m.baseline_id
