-- Acceptance against load from aggregate counters alone: the load curve a log allows.
-- Grain: one row per deployment_id, batch_bucket of the interval's running requests
-- (the engine's `Running: N reqs` when the interval ended, a batch-size proxy).
--
-- Accept length is 1 + Σ accepted / Σ num_drafts over the intervals with a draft
-- count; drafts_share is the share of the bucket's draft tokens they hold. Benchmark
-- runs (benchmark_source) are left out: a load curve is production's, and a run's
-- summary carries no running count anyway.
select
    deployment_id,
    batch_bucket(running_requests) as batch_bucket,
    batch_bucket_min(batch_bucket(running_requests)) as bucket_min,
    count(*) as num_intervals,
    sum(num_draft_tokens) as num_draft_tokens,
    sum(num_accepted_tokens) as num_accepted_tokens,
    1 + sum(num_accepted_tokens) filter (where num_drafts is not null) / nullif(sum(num_drafts), 0)
        as mean_accept_length,
    sum(num_accepted_tokens) / nullif(sum(num_draft_tokens), 0) as acceptance_rate,
    sum(num_draft_tokens) filter (where num_drafts is not null) / nullif(sum(num_draft_tokens), 0) as drafts_share,
    avg(generation_tokens_per_s order by series, end_time) as mean_generation_tokens_per_s,
    avg(kv_cache_usage order by series, end_time) as mean_kv_cache_usage,
    avg(reported_accept_length order by series, end_time) as mean_reported_accept_length,
    min(reported_accept_length_definition) as reported_accept_length_definition
from intervals
where running_requests is not null and not benchmark_source(source)
group by deployment_id, batch_bucket(running_requests)
