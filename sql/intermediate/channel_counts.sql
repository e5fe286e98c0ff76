-- The acceptance counts of each channel that carries them, row by row, with the time each
-- row covers: the intervals of every production source (an engine's log lines, its
-- per-request responses, Prometheus counter differences; benchmark runs are other traffic;
-- sglang-log prints ratios only)
-- and the rounds, summed per request (request_rounds: no pass over the rounds).
-- Grain: one row per intervals row with counts (channel = its source) and per request with
-- clean rounds (channel 'rounds').
--
-- A row covers [start_us, end_us]: an interval's window (its end alone when its start is
-- unknown), a request's arrival to its finish (its arrival alone when it has no finish).
-- Rounds of a request without a requests row have no time and are left out here.
select
    deployment_id,
    source as channel,
    epoch_us(coalesce(start_time, end_time)) as start_us,
    epoch_us(end_time) as end_us,
    num_accepted_tokens as accepted,
    num_draft_tokens as drafted,
    num_drafts as drafts,
    accepted_per_position
from intervals
where not benchmark_source(source)
    and num_draft_tokens is not null
    and num_accepted_tokens is not null

union all

select
    r.deployment_id,
    'rounds' as channel,
    epoch_us(q.arrival_time) as start_us,
    epoch_us(coalesce(q.finish_time, q.arrival_time)) as end_us,
    r.num_accepted_tokens as accepted,
    r.num_draft_tokens as drafted,
    r.num_spec_rounds as drafts,
    null as accepted_per_position
from request_rounds as r
join requests as q on q.request_uid = r.request_uid
where r.num_spec_rounds > 0
