-- Repetition in each request's text: could an n-gram copier have drafted its output tokens?
-- Grain: one row per request (request_uid) that has output_token_ids. The prompt-based
-- columns (eligible_positions … prompt_copy_ratio) need prompt_token_ids too and are
-- null without them.
--
-- Output position t is a repeat(n) when the (n+1)-gram (ctx[-n:], output[t]) occurs
-- inside ctx = prompt + output[:t]; a prompt copy when that occurrence lies in the
-- prompt. Each (n+1)-gram is hashed (ngram_hash, n = repeat_n()); its first
-- occurrence in the request decides both: a repeat when it ends before position t,
-- a prompt copy when it ends inside the prompt (counted per gram: gram_groups).
-- Positions with fewer than n tokens of context are not eligible.
--
-- self_repeat_ratio(n) is repeat_ratio(n) with the context restricted to the output
-- itself (request_anomalies: looping). Position t is self-eligible when its (n+1)-gram
-- starts inside the output (t ≥ n), and a self-repeat when that gram ended earlier
-- wholly inside the output: a prompt copy alone is not a self-repeat, which is what
-- tells a loop from a code edit. The same pass computes both, over the same groups.
with sequences as (
    select
        request_uid,
        -- without prompt ids only the output is read: its self_repeat columns need no prompt
        coalesce(array_length(prompt_token_ids), 0) as prompt_len,
        case
            when prompt_token_ids is null then output_token_ids
            else list_concat(prompt_token_ids, output_token_ids)
        end as s
    from requests
    where output_token_ids is not null
),

grams as (
    -- position e is 0-based; the list index of the same token is e + 1. One list of
    -- (e, gram) pairs is unnested, not two lists side by side: Spark allows one
    -- generator per select.
    select p.request_uid, p.prompt_len, p.g.e as e, p.g.gram as gram
    from (
        select
            request_uid,
            prompt_len,
            unnest(list_transform(range(repeat_n() + 1, array_length(s) + 1),
                                  lambda i: {'e': i - 1, 'gram': ngram_hash(s, i)})) as g
        from sequences
    ) as p
),

gram_groups as (
    -- one row per (request, gram). Each position's own test (first occurrence before it,
    -- or inside the prompt) only asks where its gram first occurs, so the counts per gram
    -- add up with no join back to the positions: of a gram's eligible positions every one
    -- but its first occurrence is a repeat (all of them when it first occurs in the
    -- prompt, and then each is a prompt copy), and of its self-eligible positions every
    -- one but the first is a self-repeat. (A join of the positions to their gram's first
    -- occurrence was planned by Spark as a broadcast of millions of keys.)
    select
        request_uid,
        prompt_len,
        min(e) as first_e,
        count(*) filter (where e >= prompt_len) as eligible,
        count(*) filter (where e - repeat_n() >= prompt_len) as self_eligible
    from grams
    group by request_uid, prompt_len, gram
),

counts as (
    select
        request_uid,
        cast(sum(eligible) as bigint) as eligible_positions,
        cast(sum(case when first_e >= prompt_len then eligible - 1 else eligible end) as bigint) as repeats,
        cast(sum(case when first_e < prompt_len then eligible else 0 end) as bigint) as prompt_copies,
        cast(sum(self_eligible) as bigint) as self_eligible_positions,
        cast(sum(case when self_eligible > 0 then self_eligible - 1 else 0 end) as bigint) as self_repeats
    from gram_groups
    group by request_uid
)

select
    q.deployment_id,
    q.request_uid,
    q.request_id,
    q.category,
    repeat_n() as repeat_n,
    array_length(q.prompt_token_ids) as prompt_len,
    array_length(q.output_token_ids) as output_len,
    case when q.prompt_token_ids is not null then coalesce(c.eligible_positions, 0) end as eligible_positions,
    case when q.prompt_token_ids is not null then coalesce(c.repeats, 0) end as repeats,
    case when q.prompt_token_ids is not null then coalesce(c.prompt_copies, 0) end as prompt_copies,
    case when q.prompt_token_ids is not null then c.repeats / nullif(c.eligible_positions, 0) end as repeat_ratio,
    case when q.prompt_token_ids is not null then c.prompt_copies / nullif(c.eligible_positions, 0) end
        as prompt_copy_ratio,
    q.output_tokens,
    coalesce(c.self_eligible_positions, 0) as self_eligible_positions,
    coalesce(c.self_repeats, 0) as self_repeats,
    c.self_repeats / nullif(c.self_eligible_positions, 0) as self_repeat_ratio
from requests as q
left join counts as c on c.request_uid = q.request_uid
where q.output_token_ids is not null
