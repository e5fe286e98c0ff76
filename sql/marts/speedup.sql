-- Throughput-weighted speedup against the matched baseline, matched on the load and
-- context each decode step ran at (matched_speedup, basis steps):
--   speedup = Σ_s committed_s · t0(batch_s, context_s) / Σ_s rounds_s · duration_s
-- over the deployment's decode steps the baseline's loads cover (matched_weights), with
-- committed_s from its rounds, or from the step's own counts when it has no rounds;
-- speedup_coverage is the share of all its committed tokens those steps hold
-- (speedup_uncovered says where the rest ran, and why). round_ms is over every round
-- with a clean step (prefill steps included); each part is averaged where known.
-- Grain: one row per deployment_id.
with covered as (
    -- steps with rounds, or steps with their own token counts (a deployment without rounds,
    -- iteration_loads): a deployment has units of one of the two only
    select deployment_id, speedup, coverage, matched_units
    from matched_speedup
    where basis in ('steps', 'iterations')
),

round_times as (
    select
        deployment_id,
        sum(num_committed_tokens) as all_committed,
        coalesce(sum(num_rounds) filter (where has_step), 0) as rounds_with_step,
        coalesce(sum(num_rounds) filter (where has_step and not decode_only), 0) as prefill_rounds,
        coalesce(sum(num_rounds) filter (where parts_overlap), 0) as overlapping_rounds,
        sum(duration_ms) / nullif(sum(duration_n), 0) as round_ms_mean,
        sum(draft_ms) / nullif(sum(draft_n), 0) as round_ms_draft,
        sum(verify_ms) / nullif(sum(verify_n), 0) as round_ms_verify,
        sum(other_ms) / nullif(sum(other_n), 0) as round_ms_other
    from round_cells
    group by deployment_id
)

select
    d.deployment_id,
    m.baseline_id,
    c.speedup,
    case when m.baseline_id is not null then coalesce(c.coverage, 0) end as speedup_coverage,
    r.round_ms_mean,
    r.round_ms_draft,
    r.round_ms_verify,
    r.round_ms_other,
    coalesce(r.rounds_with_step, 0) as rounds_with_step,
    coalesce(r.prefill_rounds, 0) as prefill_rounds,
    r.prefill_rounds / nullif(r.rounds_with_step, 0) as prefill_round_share,
    coalesce(r.overlapping_rounds, 0) as overlapping_rounds,
    case
        when m.baseline_note is not null then m.baseline_note
        when c.speedup is not null then null
        when not (select present from trace_tables where table_name = 'steps')
            then 'no speedup: the steps table is absent, so round times are unknown'
        when coalesce(r.rounds_with_step, 0) = 0 then 'no speedup: no round has a clean step'
        when c.speedup is null
            then 'no speedup: none of its decode steps ran at a load (and context) that '
                 || m.baseline_id || ' measured (a load cell with at least ' || min_baseline_steps()
                 || ' decode steps and ' || min_baseline_requests() || ' requests, or between two such cells)'
    end as speedup_note
from deployments as d
left join matched_baseline as m on m.deployment_id = d.deployment_id
left join covered as c on c.deployment_id = d.deployment_id
left join round_times as r on r.deployment_id = d.deployment_id
