-- Requests to look at: each request that one of three exact rules flags (docs/metrics.md,
-- "Requests to look at"), with the value that tripped the rule and its threshold.
-- Grain: one row per flagged (deployment_id, request_id, partition, kind).
--
-- partition: the request's partition values (request_partitions, e.g. date=2026-11-28),
-- since request ids may restart in each partition folder; null when requests has none.
--
-- The thresholds are macros named like the keys of the gates TOML's [anomalies] section,
-- created with its defaults; `report --config` replaces them. A request that lacks what
-- a rule needs is not flagged by it (anomaly_checks counts those).
--   looping: output_tokens ≥ looping_min_output_tokens and self_repeat_ratio(n) ≥
--     looping_min_self_repeat_ratio; value = self_repeat_ratio, threshold = the ratio.
--   no_acceptance: ≥ no_acceptance_min_spec_rounds speculative rounds and no accepted draft,
--     on a deployment whose acceptance_rate ≥ no_acceptance_min_deployment_acceptance;
--     value = the speculative rounds, threshold = their minimum.
--   stall: max_stall ≥ stall_min_ms and ≥ stall_min_median_multiple × the median max_stall
--     of the deployment's requests; value = max_stall_ms, threshold = the larger bound.
with looping as (
    select
        deployment_id,
        request_uid,
        request_id,
        'looping' as kind,
        self_repeat_ratio as value,
        cast(looping_min_self_repeat_ratio() as double) as threshold,
        'self_repeat_ratio(' || cast(repeat_n as varchar) || '): ' || cast(self_repeats as varchar)
            || ' of ' || cast(self_eligible_positions as varchar) || ' output positions repeat the output; '
            || cast(output_tokens as varchar) || ' output tokens' as detail
    from request_repetition
    where output_tokens >= looping_min_output_tokens()
        and self_repeat_ratio >= looping_min_self_repeat_ratio()
),

deployment_acceptance as (
    select deployment_id, acceptance_rate
    from acceptance_totals
    where grouping = 'deployment'
),

no_acceptance as (
    select
        r.deployment_id,
        r.request_uid,
        r.request_id,
        'no_acceptance' as kind,
        cast(r.num_spec_rounds as double) as value,
        cast(no_acceptance_min_spec_rounds() as double) as threshold,
        '0 of ' || cast(r.num_draft_tokens as varchar) || ' drafts accepted over '
            || cast(r.num_spec_rounds as varchar) || ' speculative rounds; the deployment accepts '
            || cast(round(100 * a.acceptance_rate, 1) as varchar) || '%' as detail
    from request_rounds as r
    join deployment_acceptance as a on a.deployment_id = r.deployment_id
    where r.num_spec_rounds >= no_acceptance_min_spec_rounds()
        and r.num_accepted_tokens = 0
        and a.acceptance_rate >= no_acceptance_min_deployment_acceptance()
),

stall_medians as (
    select
        deployment_id,
        quantile_cont(max_stall_ms, 0.5) as median_ms,
        count(*) as num_requests
    from request_stalls
    group by deployment_id
),

stall as (
    select
        s.deployment_id,
        s.request_uid,
        s.request_id,
        'stall' as kind,
        s.max_stall_ms as value,
        greatest(cast(stall_min_ms() as double), stall_min_median_multiple() * m.median_ms) as threshold,
        'max_stall ' || cast(round(s.max_stall_ms, 1) as varchar) || ' ms; the deployment''s median max_stall is '
            || cast(round(m.median_ms, 1) as varchar) || ' ms over ' || cast(m.num_requests as varchar)
            || ' requests' as detail
    from request_stalls as s
    join stall_medians as m on m.deployment_id = s.deployment_id
    where s.max_stall_ms >= stall_min_ms()
        and s.max_stall_ms >= stall_min_median_multiple() * m.median_ms
),

flagged as (
    select deployment_id, request_uid, request_id, kind, value, threshold, detail from looping
    union all
    select deployment_id, request_uid, request_id, kind, value, threshold, detail from no_acceptance
    union all
    select deployment_id, request_uid, request_id, kind, value, threshold, detail from stall
)

select f.deployment_id, f.request_id, p.partition, f.kind, f.value, f.threshold, f.detail
from flagged as f
left join request_partitions as p on p.request_uid = f.request_uid
