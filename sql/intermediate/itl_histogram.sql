-- How many streaming gaps of each length a deployment had, to the microsecond.
-- Grain: one row per (deployment_id, gap_us) that occurred.
--
-- Gaps are differences of timestamps, so they are whole microseconds: this
-- histogram holds every gap exactly, in as many rows as there are distinct
-- lengths (thousands, where itl_gaps has one row per emitted chunk). The itl
-- quantiles are read from it (latency_summary), exactly as from the gaps.
with gaps as (
    select deployment_id, unnest(gaps_us) as gap_us
    from request_rounds
    where packed
    union all
    select deployment_id, gap_us
    from request_gaps_unpacked
)

select deployment_id, gap_us, count(*) as n
from gaps
group by deployment_id, gap_us
