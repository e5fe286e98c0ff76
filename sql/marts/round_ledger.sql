-- The round-cost ledger: where a decode round's time goes (draft / verify / other)
-- per batch bucket, next to the baseline's t0 and the break-even round time
-- t0 · tokens_per_round, the time plain decoding would need for the same tokens.
-- Grain: one row per deployment_id, batch_bucket.
select
    deployment_id,
    batch_bucket,
    bucket_min,
    num_rounds,
    draft_ms,
    verify_ms,
    other_ms,
    round_ms,
    tokens_per_round,
    t0_ms,
    t0_ms * tokens_per_round as break_even_ms,
    condition_holds
from speedup_by_batch
