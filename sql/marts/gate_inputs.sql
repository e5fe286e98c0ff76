-- Inputs of the deployment gates (docs/commands.md "Gates"): the value that each
-- gate check compares with its threshold, and the matched baseline's value of the
-- same check (baseline_*): a speculative deployment is gated on what speculation
-- changes, so each latency check and the failed share are compared with its
-- baseline's. Thresholds come from --config, so pass/fail/shared/unknown is decided
-- in analyzer/decide/gates.py, not here.
--   match_rate   = requests with matches_reference = true / requests where it is not null
--   quality_drop = matched baseline's mean quality_score − this deployment's
--   failed_share = requests with finish_reason error or abort / requests
-- A value whose column is absent from every requests file is null (unknown),
-- never computed from defaults (docs/trace-format.md).
-- Grain: one row per deployment_id.
with has as (
    select
        coalesce(bool_or(present) filter (where column_name = 'matches_reference'), false)
            as matches_reference,
        coalesce(bool_or(present) filter (where column_name = 'quality_score'), false) as quality_score
    from trace_columns
    where table_name = 'requests'
),

known as (
    select
        t.deployment_id,
        t.num_requests,
        t.failed_requests,
        t.failed_requests / t.num_requests as failed_share,
        case when has.matches_reference then t.matches_checked end as matches_checked,
        case when has.matches_reference then t.matches_true end as matches_true,
        case when has.quality_score then t.quality_n end as quality_n,
        case when has.quality_score then t.quality_mean end as quality_mean
    from request_totals as t
    cross join has
),

latency_wide as (
    select
        deployment_id,
        max(p99) filter (where metric = 'ttft') as ttft_p99_ms,
        max(p95) filter (where metric = 'tpot') as tpot_p95_ms,
        max(p99) filter (where metric = 'max_stall') as max_stall_p99_ms,
        max(n) filter (where metric = 'ttft') as ttft_n,
        max(n) filter (where metric = 'tpot') as tpot_n,
        max(n) filter (where metric = 'max_stall') as max_stall_n
    from latency
    group by deployment_id
)

select
    d.deployment_id,
    d.method,
    m.baseline_id,
    m.baseline_note,
    coalesce(k.num_requests, 0) as num_requests,
    case when has.matches_reference then coalesce(k.matches_checked, 0) end as matches_checked,
    case when has.matches_reference then coalesce(k.matches_true, 0) end as matches_true,
    k.matches_true / nullif(k.matches_checked, 0) as match_rate,
    case when has.quality_score then coalesce(k.quality_n, 0) end as quality_n,
    k.quality_mean,
    b.quality_mean as baseline_quality_mean,
    b.quality_mean - k.quality_mean as quality_drop,
    k.failed_requests,
    k.failed_share,
    b.num_requests as baseline_num_requests,
    b.failed_requests as baseline_failed_requests,
    b.failed_share as baseline_failed_share,
    l.ttft_p99_ms,
    l.tpot_p95_ms,
    l.max_stall_p99_ms,
    bl.ttft_p99_ms as baseline_ttft_p99_ms,
    bl.tpot_p95_ms as baseline_tpot_p95_ms,
    bl.max_stall_p99_ms as baseline_max_stall_p99_ms,
    coalesce(l.ttft_n, 0) as ttft_n,
    coalesce(l.tpot_n, 0) as tpot_n,
    coalesce(l.max_stall_n, 0) as max_stall_n,
    coalesce(bl.ttft_n, 0) as baseline_ttft_n,
    coalesce(bl.tpot_n, 0) as baseline_tpot_n,
    coalesce(bl.max_stall_n, 0) as baseline_max_stall_n,
    s.speedup,
    s.speedup_note,
    c.preemptions_per_request
from deployments as d
cross join has
left join matched_baseline as m on m.deployment_id = d.deployment_id
left join known as k on k.deployment_id = d.deployment_id
left join known as b on b.deployment_id = m.baseline_id
left join latency_wide as l on l.deployment_id = d.deployment_id
left join latency_wide as bl on bl.deployment_id = m.baseline_id
left join speedup as s on s.deployment_id = d.deployment_id
left join capacity as c on c.deployment_id = d.deployment_id
