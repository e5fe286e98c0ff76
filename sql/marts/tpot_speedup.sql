-- Speedup from request timings alone, for traces without steps (docs/importers.md):
-- tpot_speedup = [Σ_B (finish − first token) / Σ_B (output_tokens − 1)]
--              / [Σ_D (finish − first token) / Σ_D (output_tokens − 1)],
-- over requests with output_tokens > 1 and both times. It is not matched on batch
-- size: the load of D and its baseline B may differ.
-- Grain: one row per deployment_id.
with per_token as (
    select
        deployment_id,
        sum(date_diff('microsecond', first_token_time, finish_time)) / 1000.0 / sum(output_tokens - 1)
            as tpot_ms,
        count(*) as num_requests
    from requests
    where output_tokens > 1 and first_token_time is not null and finish_time is not null
    group by deployment_id
)

select
    m.deployment_id,
    m.baseline_id,
    d.tpot_ms,
    b.tpot_ms as baseline_tpot_ms,
    b.tpot_ms / nullif(d.tpot_ms, 0) as tpot_speedup,
    coalesce(d.num_requests, 0) as num_requests
from matched_baseline as m
left join per_token as d on d.deployment_id = m.deployment_id
left join per_token as b on b.deployment_id = m.baseline_id
