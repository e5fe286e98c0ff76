-- Throughput-weighted speedup against the matched baseline:
--   speedup = Σ_b t0(b) · committed_D(b) / Σ_b time_D(b), over the decode-only
-- batch buckets both deployments cover where the baseline's t0 is usable (baseline_t0:
-- enough baseline steps and requests); speedup_coverage is the share of D's committed
-- tokens those buckets hold (speedup_uncovered lists the rest). round_ms is over every round with a
-- clean step (prefill steps included); each part is averaged where known.
-- Grain: one row per deployment_id.
with covered as (
    select
        d.deployment_id,
        -- a DOUBLE sum, added in bucket order so that every run adds it alike
        sum(t.t0_ms * d.num_committed_tokens order by d.batch_bucket) as baseline_time_ms,
        sum(d.time_ms) as time_ms,
        sum(d.num_committed_tokens) as committed
    from decode_totals as d
    join baseline_t0 as t
        on t.deployment_id = d.deployment_id
        and t.batch_bucket = d.batch_bucket
        and t.context_bucket is null
    where d.grouping = 'batch' and t.t0_ms is not null
    group by d.deployment_id
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
    c.baseline_time_ms / nullif(c.time_ms, 0) as speedup,
    case when m.baseline_id is not null then coalesce(c.committed, 0) / nullif(r.all_committed, 0) end
        as speedup_coverage,
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
        when not (select present from trace_tables where table_name = 'steps')
            then 'no speedup: the steps table is absent, so round times are unknown'
        when coalesce(r.rounds_with_step, 0) = 0 then 'no speedup: no round has a clean step'
        when c.deployment_id is null
            then 'no speedup: no decode-only batch bucket of this deployment has a usable t0 of '
                 || m.baseline_id || ' (one it ran with at least ' || min_baseline_steps()
                 || ' decode steps and ' || min_baseline_requests() || ' requests)'
    end as speedup_note
from deployments as d
left join matched_baseline as m on m.deployment_id = d.deployment_id
left join covered as c on c.deployment_id = d.deployment_id
left join round_times as r on r.deployment_id = d.deployment_id
