-- How each load a speculative deployment ran at is matched with its baseline: the two
-- measured loads of the baseline it lies between, the weights that interpolate their
-- time per token, and the context slope (docs/metrics.md, "Speedup at the load and
-- context each step ran at").
-- Grain: one row per (basis, deployment_id, load) of a speculative deployment with a
-- matched baseline that has units of that basis (matched_units).
--
-- The baseline's time per token at load L and context X is
--     t0(L, X) = w_lo · f(lo) + w_hi · f(hi) + κ · X,   f(c) = t0_ms(c) − κ · X̄(c),
-- where lo and hi are its supported cells (matched_support) whose points lie nearest
-- below and above L, w_hi = (L − point_lo) / (point_hi − point_lo) and w_lo = 1 − w_hi,
-- and X̄(c) = tx / tokens is the cell's mean context. κ is the slope of time per token on
-- context within cells, pooled over the baseline's supported cells (Σ Sxy / Σ Sxx,
-- token-weighted, not below 0); it is 0 where context is unknown (a step of either side
-- without context_len, or another basis) or never varied within a cell.
-- level_ms = w_lo · f(lo) + w_hi · f(hi): t0 at L less its context term.
--
-- Nothing is extrapolated past the loads the baseline ran. A load is matched (covered)
--   between two points at most max_load_gap() apart (point_hi ≤ point_lo ·
--   (1 + max_load_gap()) + 1), interpolated;
--   below the lowest point, down to the least load of that cell, or above the highest,
--   up to the most load of that cell, at that cell's value (the baseline ran there);
-- and otherwise not, with reason no_baseline_loads (the baseline has no supported cell),
-- load_gap (its nearest loads lie too far apart), below_baseline_loads or
-- above_baseline_loads. A step is matched on context when its context per request lies
-- within [least / (1 + context_margin()), most · (1 + context_margin())] of the context
-- per request the baseline's steps in the two cells held (context_lo, context_hi;
-- matched_sums applies it). context_known: both sides' steps all have context_len.
with pairs as (
    select m.deployment_id, m.baseline_id
    from matched_baseline as m
    join deployments as d on d.deployment_id = m.deployment_id and d.method <> 'none'
    where m.baseline_id is not null
),

loads as (
    select
        u.basis,
        u.deployment_id,
        p.baseline_id,
        u.load,
        count(*) = count(u.context_tokens) as context_complete
    from matched_units as u
    join pairs as p on p.deployment_id = u.deployment_id
    group by u.basis, u.deployment_id, p.baseline_id, u.load
),

sides as (
    -- per (basis, deployment): do all its units (of the speculative side) have a context
    select basis, deployment_id, baseline_id, bool_and(context_complete) as context_complete
    from loads
    group by basis, deployment_id, baseline_id
),

supported as (
    select * from matched_support where supported
),

slopes as (
    -- per (basis, baseline): the pooled within-cell slope of time per token on context
    select
        basis,
        deployment_id as baseline_id,
        bool_and(context_units = units) as context_complete,
        -- doubles from exact per-cell sums, added in cell order: the same in every run
        sum(cast(yx as double) - cast(tx as double) * cast(time_ms as double) / cast(tokens as double) order by cell)
            as sxy,
        sum(cast(txx as double) - cast(tx as double) * cast(tx as double) / cast(tokens as double) order by cell)
            as sxx
    from supported
    group by basis, deployment_id
),

neighbours as (
    select
        l.basis,
        l.deployment_id,
        l.baseline_id,
        l.load,
        max(s.point) filter (where s.point <= l.load) as point_lo,
        min(s.point) filter (where s.point >= l.load) as point_hi,
        count(s.cell) as supported_cells
    from loads as l
    left join supported as s on s.basis = l.basis and s.deployment_id = l.baseline_id
    group by l.basis, l.deployment_id, l.baseline_id, l.load
),

kappa as (
    select
        w.basis,
        w.deployment_id,
        w.baseline_id,
        w.context_complete and coalesce(k.context_complete, false) as context_known,
        case
            when w.basis = 'steps' and w.context_complete and k.context_complete and k.sxx > 0
                then greatest(k.sxy / k.sxx, 0)
            else 0
        end as kappa
    from sides as w
    left join slopes as k on k.basis = w.basis and k.baseline_id = w.baseline_id
),

placed as (
    select
        n.*,
        lo.cell as cell_lo,
        hi.cell as cell_hi,
        lo.t0_ms - k.kappa * coalesce(cast(lo.tx as double), 0) / cast(lo.tokens as double) as f_lo,
        hi.t0_ms - k.kappa * coalesce(cast(hi.tx as double), 0) / cast(hi.tokens as double) as f_hi,
        k.kappa,
        k.context_known,
        lo.min_load as lo_min_load,
        lo.max_load as lo_max_load,
        hi.min_load as hi_min_load,
        hi.max_load as hi_max_load,
        least(lo.min_context, hi.min_context) / (1 + context_margin()) as context_lo,
        greatest(lo.max_context, hi.max_context) * (1 + context_margin()) as context_hi,
        case
            when n.supported_cells = 0 then 'no_baseline_loads'
            when n.point_lo is not null and n.point_hi is not null
                and n.point_hi > n.point_lo * (1 + max_load_gap()) + 1 then 'load_gap'
            when n.point_lo is null and n.load < hi.min_load then 'below_baseline_loads'
            when n.point_hi is null and n.load > lo.max_load then 'above_baseline_loads'
        end as reason
    from neighbours as n
    join kappa as k on k.basis = n.basis and k.deployment_id = n.deployment_id
    left join supported as lo on lo.basis = n.basis and lo.deployment_id = n.baseline_id and lo.point = n.point_lo
    left join supported as hi on hi.basis = n.basis and hi.deployment_id = n.baseline_id and hi.point = n.point_hi
),

weighted as (
    select
        *,
        case
            when reason is not null then null
            when point_lo is null or point_hi is null or point_hi = point_lo then 1.0
            else (point_hi - cast(load as double)) / (point_hi - point_lo)
        end as w_lo
    from placed
)

select
    basis,
    deployment_id,
    baseline_id,
    load,
    reason is null as covered,
    reason,
    -- one cell stands alone: below the lowest point or above the highest, or exactly on one
    coalesce(cell_lo, cell_hi) as cell_lo,
    case when cell_lo is not null and cell_hi is not null and cell_hi <> cell_lo then cell_hi end as cell_hi,
    case when reason is null then w_lo end as w_lo,
    case when reason is null and cell_lo is not null and cell_hi is not null and cell_hi <> cell_lo
        then 1 - w_lo end as w_hi,
    case when reason is null then
        case
            when cell_lo is null then f_hi
            when cell_hi is null or cell_hi = cell_lo then f_lo
            else w_lo * f_lo + (1 - w_lo) * f_hi
        end
    end as level_ms,
    kappa,
    context_known,
    case when context_known then context_lo end as context_lo,
    case when context_known then context_hi end as context_hi,
    point_lo,
    point_hi
from weighted
