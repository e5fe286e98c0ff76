-- Each timed request as a unit of the matched comparisons: the load it decoded at,
-- estimated from request timings alone (docs/metrics.md, "Load from request timings").
-- Grain: one row per clean request (request_uid) with first_token_time and finish_time
-- (finish not before first token).
--
-- A request decodes from its first token to its finish. A deployment's concurrency at
-- time t is the number of its requests decoding then, c(t); F(t) = ∫ c is its running
-- integral. A request's load is the mean concurrency over its own decode,
-- (F(finish) − F(first token)) / (finish − first token), itself included: the batch
-- size it ran at, as well as timings can tell (the mean number of requests in the step,
-- where steps are known). A request whose decode took no time (one output token) gets
-- the concurrency at its first token. load is rounded to a tenth of a request, so loads group and sums of them are exact.
-- tokens = output_tokens − 1 and time_ms = finish − first token: what the speedup from
-- request timings divides. time_block: the request's block of time, 1 to
-- intervals_blocks(), by arrival (equal numbers of the deployment's timed requests each).
-- Ties are ordered by request_id, the id the trace wrote, so every engine cuts the blocks
-- alike (request_uid is each engine's own hash, and breaks a tie only between partitions).
with timed as (
    select
        deployment_id,
        request_uid,
        request_id,
        epoch_us(arrival_time) as arrival_us,
        epoch_us(first_token_time) as first_us,
        epoch_us(finish_time) as finish_us,
        prompt_tokens,
        output_tokens
    from requests
    where first_token_time is not null and finish_time is not null and finish_time >= first_token_time
),

events as (
    -- +1 at a first token, −1 at a finish
    select deployment_id, request_uid, request_id, first_us as t, 1 as delta, 1 as kind from timed
    union all
    select deployment_id, request_uid, request_id, finish_us, -1, 2 from timed
),

levels as (
    -- the concurrency from each event to the next (ties: finishes first, so a request
    -- that starts when another ends never counts them both)
    select
        *,
        sum(delta) over (partition by deployment_id order by t, delta, request_id, request_uid, kind
                         rows between unbounded preceding and current row) as level,
        lead(t) over (partition by deployment_id order by t, delta, request_id, request_uid, kind) as next_t
    from events
),

integrals as (
    -- F at each event: the concurrency integrated over the events before it (µs · requests)
    select
        *,
        coalesce(sum(cast(level as double) * (next_t - t))
                     over (partition by deployment_id order by t, delta, request_id, request_uid, kind
                           rows between unbounded preceding and 1 preceding), 0) as area_before
    from levels
),

per_request as (
    select
        deployment_id,
        request_uid,
        max(area_before) filter (where kind = 1) as f_first,
        max(area_before) filter (where kind = 2) as f_finish,
        max(level) filter (where kind = 1) as level_at_first
    from integrals
    group by deployment_id, request_uid
)

select
    t.deployment_id,
    t.request_uid,
    t.arrival_us,
    t.prompt_tokens,
    t.output_tokens,
    cast(round(case
        when t.finish_us > t.first_us then (p.f_finish - p.f_first) / (t.finish_us - t.first_us)
        -- no decode: its own finish, at the same time, sorts before its first token
        -- (finishes first), so the level there leaves it out; itself included, +1
        else p.level_at_first + 1
    end, 1) as decimal(18, 1)) as load,
    t.output_tokens - 1 as tokens,
    cast((t.finish_us - t.first_us) / 1000.0 as decimal(18, 6)) as time_ms,
    ntile(intervals_blocks()) over (partition by t.deployment_id order by t.arrival_us, t.request_id, t.request_uid)
        as time_block
from timed as t
join per_request as p on p.deployment_id = t.deployment_id and p.request_uid = t.request_uid
