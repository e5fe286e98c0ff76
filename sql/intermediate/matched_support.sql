-- What a plain-decoding deployment measured in each load cell: the points the matched
-- speedup interpolates its time per token between (docs/metrics.md, "Speedup at the load
-- and context each step ran at").
-- Grain: one row per (basis, deployment_id, cell) of a deployment with method none that
-- has units of that basis in the cell (matched_units).
--
-- t0_ms = Σ time / Σ tokens, the time plain decoding took per token (per request) in the
-- cell; point = Σ tokens · load / Σ tokens, the load it was measured at. tx = Σ tokens · X,
-- txx = Σ tokens · X², yx = Σ time · X (X = a step's context tokens): the sums of the
-- token-weighted fit of time per token on X within the cell, whose slope matched_weights
-- pools over the cells. min_context and max_context: the least and most context per
-- request its steps held.
--
-- supported: the cell's t0 is used, because it rests on enough units: min_baseline_steps()
-- decode steps and min_baseline_requests() distinct requests (basis steps; a step of
-- more than 16 requests holds that many itself, below that batch_size_requests counts
-- them), min_baseline_steps() decode steps (basis iterations: iteration lines name no
-- request, so requests is null and not counted), min_baseline_requests() requests (basis
-- requests), or min_log_intervals() log intervals (basis logs) (the gates TOML's [evidence]). A cell below its floor is no
-- point of the curve: no load is matched by it.
with cells as (
    select
        u.basis,
        u.deployment_id,
        u.cell,
        count(*) as units,
        sum(u.tokens) as tokens,
        sum(u.time_ms) as time_ms,
        sum(u.tokens * u.load) as token_load,
        min(u.load) as min_load,
        max(u.load) as max_load,
        count(u.context_tokens) as context_units,
        sum(u.tokens * u.context_tokens) as tx,
        sum(u.tokens * u.context_tokens * u.context_tokens) as txx,
        sum(u.time_ms * u.context_tokens) as yx,
        min(u.context_per_request) as min_context,
        max(u.context_per_request) as max_context
    from matched_units as u
    join deployments as d on d.deployment_id = u.deployment_id and d.method = 'none'
    group by u.basis, u.deployment_id, u.cell
),

counted as (
    select
        c.*,
        case
            when c.basis = 'steps' and c.cell <= 16 then coalesce(q.num_requests, 0)
            when c.basis = 'requests' then c.units
        end as requests
    from cells as c
    left join batch_size_requests as q
        on c.basis = 'steps' and q.deployment_id = c.deployment_id and q.batch_size = c.cell
)

select
    basis,
    deployment_id,
    cell,
    units,
    requests,
    tokens,
    time_ms,
    cast(time_ms as double) / nullif(cast(tokens as double), 0) as t0_ms,
    cast(token_load as double) / nullif(cast(tokens as double), 0) as point,
    min_load,
    max_load,
    context_units,
    tx,
    txx,
    yx,
    min_context,
    max_context,
    case
        when tokens <= 0 then 'no_tokens'
        when basis = 'steps' and units < min_baseline_steps() and coalesce(requests, min_baseline_requests()) < min_baseline_requests()
            then 'few_baseline_steps_and_requests'
        when basis = 'steps' and units < min_baseline_steps() then 'few_baseline_steps'
        when basis = 'steps' and requests < min_baseline_requests() then 'few_baseline_requests'
        when basis = 'requests' and units < min_baseline_requests() then 'few_baseline_requests'
        when basis = 'iterations' and units < min_baseline_steps() then 'few_baseline_steps'
        when basis = 'logs' and units < min_log_intervals() then 'few_baseline_intervals'
    end as guard,
    tokens > 0
        and case basis
            when 'steps' then units >= min_baseline_steps() and coalesce(requests, min_baseline_requests()) >= min_baseline_requests()
            when 'iterations' then units >= min_baseline_steps()
            when 'requests' then units >= min_baseline_requests()
            else units >= min_log_intervals()
        end as supported
from counted
