-- Quantization variants: each deployment of a model classified against the model's
-- reference baseline, the `none` deployment whose target has the highest precision
-- (seed section 6: measure baseline, quant only, spec only and combined separately,
-- and state each one's quality reference).
-- Grain: one row per deployment_id.
--
-- Precision rank of target_quant (lowercased, trimmed; null reads as the default
-- bf16), in effective bits, higher is more precise:
--   32  fp32, float32
--   16  bf16, bfloat16, fp16, float16, half
--    8  fp8, fp8_e4m3, fp8_e5m2, mxfp8, int8, w8a8, w8a16
--    6  fp6, mxfp6
--    4  fp4, nvfp4, mxfp4, int4, w4a16, w4a8, awq
--    0  any other name: unknown names rank below every known one
-- The reference is the single `none` deployment of the model at the top rank. When
-- several `none` deployments share the top rank (bf16 and fp16 count as a tie) there
-- is no reference and no matrix for that model; neither is there one for a model
-- with no `none` deployment. Every other deployment of a model with a reference is:
--   baseline    the reference itself
--   quant_only  method none, target rank below the reference's
--   spec_only   speculative, target at the reference's rank
--   combined    speculative, target rank below the reference's
-- A speculative target ranked above the reference has no variant (no `none`
-- deployment at its precision to compare with), with a note.
-- exact_to says what the output is exact to: a quantized draft changes only the
-- proposal q, so spec_only stays exact to its target; a quantized target changes
-- the verification reference to p_quant, so quant_only and combined are exact to
-- the quantized target, not to the reference.
-- variant_notes lists the caveats (no matrix, no variant, another number format or
-- other hardware); variant_note joins them with '; ' for reading only.
with precision_ranks as (
    select quant, precision_rank
    from (values
        ('fp32', 32), ('float32', 32),
        ('bf16', 16), ('bfloat16', 16), ('fp16', 16), ('float16', 16), ('half', 16),
        ('fp8', 8), ('fp8_e4m3', 8), ('fp8_e5m2', 8), ('mxfp8', 8), ('int8', 8), ('w8a8', 8), ('w8a16', 8),
        ('fp6', 6), ('mxfp6', 6),
        ('fp4', 4), ('nvfp4', 4), ('mxfp4', 4), ('int4', 4), ('w4a16', 4), ('w4a8', 4), ('awq', 4)
    ) as p(quant, precision_rank)
),

ranked as (
    select
        d.deployment_id,
        d.model,
        d.method,
        d.num_speculative_tokens,
        coalesce(d.target_quant, 'bf16') as target_quant,
        d.draft_quant,
        d.gpu,
        d.tensor_parallel_size,
        coalesce(p.precision_rank, 0) as precision_rank
    from deployments as d
    left join precision_ranks as p on p.quant = lower(trim(coalesce(d.target_quant, 'bf16')))
),

top_rank as (
    select model, max(precision_rank) as top_rank
    from ranked
    where method = 'none'
    group by model
),

top_baselines as (
    select
        r.model,
        count(*) as num_top,
        min(r.deployment_id) as reference_id,
        string_agg(r.deployment_id || ' (' || r.target_quant || ')', ', ' order by r.deployment_id) as top_ids
    from ranked as r
    join top_rank as t on t.model = r.model and t.top_rank = r.precision_rank
    where r.method = 'none'
    group by r.model
),

references_by_model as (
    select
        b.model,
        b.num_top,
        b.top_ids,
        case when b.num_top = 1 then b.reference_id end as reference_id,
        case when b.num_top = 1 then r.target_quant end as reference_quant,
        case when b.num_top = 1 then r.precision_rank end as reference_rank,
        case when b.num_top = 1 then r.gpu end as reference_gpu,
        case when b.num_top = 1 then r.tensor_parallel_size end as reference_tp
    from top_baselines as b
    join ranked as r on r.deployment_id = b.reference_id
),

classified as (
    select
        r.*,
        m.reference_id,
        m.reference_quant,
        m.reference_rank,
        m.num_top,
        m.top_ids,
        not (coalesce(r.gpu <> m.reference_gpu, false)
             or coalesce(r.tensor_parallel_size <> m.reference_tp, false)) as hardware_matches,
        m.reference_gpu,
        m.reference_tp,
        case
            when m.reference_id is null then null
            when r.deployment_id = m.reference_id then 'baseline'
            when r.method = 'none' and r.precision_rank < m.reference_rank then 'quant_only'
            when r.method <> 'none' and r.precision_rank = m.reference_rank then 'spec_only'
            when r.method <> 'none' and r.precision_rank < m.reference_rank then 'combined'
        end as variant
    from ranked as r
    left join references_by_model as m on m.model = r.model
)

select
    deployment_id,
    model,
    method,
    num_speculative_tokens,
    target_quant,
    draft_quant,
    precision_rank,
    variant,
    reference_id,
    reference_quant,
    reference_rank,
    hardware_matches,
    case variant
        when 'baseline' then 'itself: the ' || target_quant || ' target is the reference'
        when 'quant_only' then 'the ' || target_quant || ' target, a different reference from '
            || reference_id || ' (' || reference_quant || ')'
        when 'spec_only' then 'the ' || target_quant || ' target'
            || case
                   when draft_quant is not null
                       then '; its ' || draft_quant || ' draft changes only speed and acceptance'
                   else ''
               end
        when 'combined' then 'the ' || target_quant || ' target, not the original ' || reference_quant
    end as exact_to,
    list_filter([
        case
            when num_top is null
                then 'no quantization matrix for model ' || model || ': it has no none deployment'
            when num_top > 1
                then 'no quantization matrix for model ' || model || ': ' || num_top
                     || ' none deployments share the top precision: ' || top_ids
        end,
        case
            when reference_id is not null and variant is null
                then deployment_id || ': target ' || target_quant || ' ranks above the reference '
                     || reference_id || ' (' || reference_quant || '), and no none deployment is at its precision'
        end,
        case
            when variant = 'spec_only' and lower(target_quant) <> lower(reference_quant)
                then deployment_id || ': target ' || target_quant || ' ranks with the reference''s '
                     || reference_quant || ' but is another number format: its output is exact to the '
                     || target_quant || ' target'
        end,
        case
            when reference_id is not null and variant <> 'baseline' and not hardware_matches
                then deployment_id || ' runs on ' || coalesce(gpu, 'gpu unset')
                     || coalesce(' tp=' || cast(tensor_parallel_size as varchar), '') || ', the reference '
                     || reference_id || ' on ' || coalesce(reference_gpu, 'gpu unset')
                     || coalesce(' tp=' || cast(reference_tp as varchar), '')
                     || ': its ratio mixes hardware with quantization'
        end
    ], lambda n: n <> '') as variant_notes,
    nullif(array_to_string(variant_notes, '; '), '') as variant_note
from classified
