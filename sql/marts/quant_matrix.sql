-- The quantization matrix: each deployment's throughput against its model's
-- top-precision reference baseline (quant_variants), its mean quality and what
-- its output is exact to.
-- Grain: one row per deployment_id.
--
--   throughput_ratio = Σ_b t0_ref(b) · committed_V(b) / Σ_b time_V(b), with
--   t0_ref(b) = reference time / reference committed in decode-only batch bucket b,
-- over the decode-only batch buckets that both V and the reference have: the
-- formula of docs/metrics.md's speedup, but always against the top-precision
-- reference, never the matched baseline (a quant_only deployment gets a ratio too,
-- and combined is compared with the original precision).
--   coverage = V's decode-only committed tokens in those buckets / all of V's
-- decode-only committed tokens (unlike speedup_coverage, prefill-step rounds are
-- left out of the denominator).
--   mean_quality = mean of requests.quality_score over V's clean requests that have
-- one; null when the column is absent from every requests file (trace_columns).
--   quality_delta = mean_quality − the reference's mean_quality.
--   notes = why a value is missing (and quant_variants' variant_notes), as a list;
-- note = the same joined by '; ', for reading only: code reads notes, since a
-- note may itself hold '; '.
with reference_t0 as (
    select
        v.deployment_id,
        b.batch_bucket,
        b.time_ms / nullif(b.num_committed_tokens, 0) as t0_ms
    from quant_variants as v
    join decode_totals as b on b.deployment_id = v.reference_id and b.grouping = 'batch'
),

own as (
    select
        deployment_id,
        sum(num_committed_tokens) as decode_committed,
        count(*) as decode_buckets
    from decode_totals
    where grouping = 'batch'
    group by deployment_id
),

covered as (
    select
        d.deployment_id,
        -- a DOUBLE sum, added in bucket order so that every run adds it alike
        sum(t.t0_ms * d.num_committed_tokens order by d.batch_bucket) as reference_time_ms,
        sum(d.time_ms) as time_ms,
        sum(d.num_committed_tokens) as committed,
        count(*) as shared_buckets
    from decode_totals as d
    join reference_t0 as t on t.deployment_id = d.deployment_id and t.batch_bucket = d.batch_bucket
    where d.grouping = 'batch' and t.t0_ms is not null
    group by d.deployment_id
),

quality_column as (
    select coalesce(bool_or(present), false) as present
    from trace_columns
    where table_name = 'requests' and column_name = 'quality_score'
),

quality as (
    select deployment_id, quality_mean as mean_quality, quality_n as quality_requests
    from request_totals
),

scored as (
    select
        v.*,
        c.reference_time_ms / nullif(c.time_ms, 0) as throughput_ratio,
        coalesce(c.committed, 0) / nullif(o.decode_committed, 0) as coverage,
        coalesce(c.shared_buckets, 0) as shared_buckets,
        coalesce(o.decode_buckets, 0) as decode_buckets,
        coalesce(o.decode_committed, 0) as decode_committed,
        (select present from quality_column) as quality_present,
        case when (select present from quality_column) then q.mean_quality end as mean_quality,
        case when (select present from quality_column) then coalesce(q.quality_requests, 0) end
            as quality_requests,
        case when (select present from quality_column) then rq.mean_quality end as reference_quality,
        ro.decode_committed as reference_decode_committed
    from quant_variants as v
    left join covered as c on c.deployment_id = v.deployment_id
    left join own as o on o.deployment_id = v.deployment_id
    left join own as ro on ro.deployment_id = v.reference_id
    left join quality as q on q.deployment_id = v.deployment_id
    left join quality as rq on rq.deployment_id = v.reference_id
),

noted as (
    select
        deployment_id,
        model,
        variant,
        method,
        num_speculative_tokens,
        target_quant,
        draft_quant,
        precision_rank,
        reference_id,
        reference_quant,
        throughput_ratio,
        coverage,
        shared_buckets,
        decode_committed,
        mean_quality,
        quality_requests,
        mean_quality - reference_quality as quality_delta,
        exact_to,
        list_filter(list_concat(variant_notes, [
            case
                when reference_id is null then null
                when not (select present from trace_tables where table_name = 'steps')
                    then 'no throughput ratio: the steps table is absent, so round times are unknown'
                when decode_committed = 0
                    then 'no throughput ratio: ' || deployment_id || ' has no decode-only round with a clean step'
                when coalesce(reference_decode_committed, 0) = 0
                    then 'no throughput ratio: the reference ' || reference_id
                         || ' has no decode-only round with a clean step'
                when shared_buckets = 0
                    then 'no throughput ratio: no decode-only batch bucket has rounds of both '
                         || deployment_id || ' and ' || reference_id
                when throughput_ratio is null
                    then 'no throughput ratio: ' || deployment_id || ' has zero round time in the shared buckets'
            end,
            case
                when reference_id is null or not quality_present then null
                when quality_requests = 0 then 'no quality: ' || deployment_id || ' has no request with a quality_score'
                when reference_quality is null and variant <> 'baseline'
                    then 'no quality delta: the reference ' || reference_id || ' has no request with a quality_score'
            end
        ]), lambda n: n <> '') as notes
    from scored
)

-- the notes also as one line, for reading; code reads the list, so a note may hold '; '
select *, nullif(array_to_string(notes, '; '), '') as note
from noted
