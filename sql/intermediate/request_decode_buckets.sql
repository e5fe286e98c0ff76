-- Each request's decode-only rounds that have a clean step, summed by batch bucket:
-- the per-request split of decode_totals, from which the speedup of any set of
-- requests follows (slice_speedup, for `report --by COLUMN`).
-- Grain: one row per (deployment_id, request_uid, batch_bucket) with such rounds.
--
-- A plain view on purpose (not in materialized.toml): it is a pass over every round,
-- paid only by a query that reads it, so the default report never pays it.
-- time_ms is an exact DECIMAL sum (exact_ms), as in round_cells.
with decode_rounds as (
    select
        deployment_id,
        request_uid,
        batch_bucket,
        num_committed_tokens,
        duration_ms
    from round_facts
    where has_step and decode_only
)

select
    deployment_id,
    request_uid,
    batch_bucket,
    count(*) as num_rounds,
    sum(num_committed_tokens) as num_committed_tokens,
    sum(exact_ms(duration_ms)) as time_ms
from decode_rounds
group by deployment_id, request_uid, batch_bucket
