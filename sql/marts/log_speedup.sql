-- Speedup from engine logs alone (basis: logs), for a speculative deployment D against
-- its matched baseline B: each of D's usable log intervals is matched at the requests
-- running when it ended (matched_speedup, basis logs):
--   log_speedup = Σ counterfactual / Σ seconds over D's matched intervals,
-- counterfactual = its tokens · B's seconds per token at that running count, interpolated
-- between the counts B logged at least min_log_intervals() intervals at (matched_weights).
-- log_speedup_coverage is the share of D's usable log tokens in matched intervals. The
-- counts say what it rests on and what was left out (log_intervals.left_out);
-- log_speedup_note says why there is no number, naming the import that would give one:
-- "not enough data" when B logged no count min_log_intervals() times, or logged the counts
-- D ran at fewer times than that; "never at comparable loads" otherwise.
-- Grain: one row per speculative deployment_id with engine-log intervals.
with speculative as (
    select d.deployment_id, m.baseline_id, m.baseline_note
    from deployments as d
    left join matched_baseline as m on m.deployment_id = d.deployment_id
    where d.method <> 'none' and d.deployment_id in (select deployment_id from log_interval_counts)
),

matched as (
    select * from matched_speedup where basis = 'logs'
),

baseline_cells as (
    select deployment_id, count(*) filter (where supported) as supported_cells,
           coalesce(sum(units) filter (where supported), 0) as supported_intervals, max(units) as most_in_a_cell
    from matched_support
    where basis = 'logs'
    group by deployment_id
),

short_counts as (
    -- D's unmatched running counts that B did log, in cells below the floor: the most
    -- intervals B logged in such a cell (a longer log of B would match them)
    select w.deployment_id, max(c.units) as most
    from matched_weights as w
    join matched_support as c
        on c.basis = 'logs' and c.deployment_id = w.baseline_id and c.cell = load_cell(w.load) and not c.supported
    where w.basis = 'logs' and not w.covered
    group by w.deployment_id
)

select
    s.deployment_id,
    s.baseline_id,
    m.speedup as log_speedup,
    case when s.baseline_id is not null then coalesce(m.coverage, 0) end as log_speedup_coverage,
    coalesce(m.matched_units, 0) as counted_intervals,
    coalesce(c.supported_intervals, 0) as baseline_counted_intervals,
    m.min_load,
    m.max_load,
    m.baseline_min_load,
    m.baseline_max_load,
    i.log_intervals,
    i.usable_intervals,
    i.intervals_without_start,
    i.intervals_without_throughput,
    i.intervals_without_running,
    i.idle_intervals,
    coalesce(b.usable_intervals, 0) as baseline_usable_intervals,
    case
        when m.speedup is not null then null
        when s.baseline_id is null
            then 'no logs speedup: ' || coalesce(s.baseline_note, 'no matched baseline')
                 || '; import the log of a deployment that does not speculate, with the same --model, to decide it'
        when coalesce(i.usable_intervals, 0) = 0
            then 'no logs speedup: none of this deployment''s log intervals has a start, a generation throughput '
                 || 'and running requests'
        when coalesce(b.usable_intervals, 0) = 0
            then 'no logs speedup: baseline ' || s.baseline_id || ' has no log interval with a start, a generation '
                 || 'throughput and running requests; import its engine log'
        when coalesce(c.supported_cells, 0) = 0
            then 'not enough data: ' || s.baseline_id || ' logged no running-request count '
                 || min_log_intervals() || ' times (the most: ' || coalesce(c.most_in_a_cell, 0)
                 || '; [evidence] min_log_intervals)'
        when k.deployment_id is not null
            then 'not enough data: ' || s.baseline_id || ' logged the running-request counts this deployment ran at ('
                 || cast(m.min_load as bigint) || '-' || cast(m.max_load as bigint) || ') fewer than '
                 || min_log_intervals() || ' times (the most: ' || k.most || '; [evidence] min_log_intervals)'
        else 'no logs speedup: this deployment ran at ' || cast(m.min_load as bigint) || '-'
             || cast(m.max_load as bigint) || ' running requests and ' || s.baseline_id || ' at '
             || cast(m.baseline_min_load as bigint) || '-' || cast(m.baseline_max_load as bigint)
             || ': never at comparable loads'
    end as log_speedup_note
from speculative as s
left join log_interval_counts as i on i.deployment_id = s.deployment_id
left join log_interval_counts as b on b.deployment_id = s.baseline_id
left join matched as m on m.deployment_id = s.deployment_id
left join baseline_cells as c on c.deployment_id = s.baseline_id
left join short_counts as k on k.deployment_id = s.deployment_id
