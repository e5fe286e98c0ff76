-- Speedup from request timings alone, for traces without steps (docs/importers.md):
-- each of D's timed requests (output_tokens > 1, first_token_time and finish_time) is
-- matched at the load it decoded at, its mean concurrency from the timings
-- (request_loads), with its baseline's time per output token at that concurrency,
-- interpolated between the concurrencies B's requests ran at (matched_speedup, basis
-- requests):
--   tpot_speedup = Σ (output_tokens − 1) · tpot_B(load) / Σ (finish − first token)
-- over D's matched requests. tpot_speedup_coverage: the share of D's output tokens after
-- the first (Σ output_tokens − 1 over its requests with more than one) in them. tpot_ms and
-- baseline_tpot_ms are each side's own pooled time per output token, at whatever loads
-- they ran: not a comparison. load and baseline_load: the median concurrency of each
-- side's timed requests.
-- Grain: one row per deployment_id.
with per_token as (
    select
        deployment_id,
        timed_duration_us / 1000.0 / timed_tokens as tpot_ms,
        timed_requests as num_requests
    from request_totals
),

loads as (
    select * from request_load_summary
)

select
    m.deployment_id,
    m.baseline_id,
    d.tpot_ms,
    b.tpot_ms as baseline_tpot_ms,
    s.speedup as tpot_speedup,
    case when s.speedup is not null then s.coverage end as tpot_speedup_coverage,
    coalesce(s.matched_units, 0) as matched_requests,
    coalesce(d.num_requests, 0) as num_requests,
    l.load,
    l.min_load,
    l.max_load,
    bl.load as baseline_load,
    bl.min_load as baseline_min_load,
    bl.max_load as baseline_max_load
from matched_baseline as m
left join per_token as d on d.deployment_id = m.deployment_id
left join per_token as b on b.deployment_id = m.baseline_id
left join matched_speedup as s on s.basis = 'requests' and s.deployment_id = m.deployment_id
left join loads as l on l.deployment_id = m.deployment_id
left join loads as bl on bl.deployment_id = m.baseline_id
