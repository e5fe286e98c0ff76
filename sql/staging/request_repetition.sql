-- Repetition in each request's text: could an n-gram copier have drafted its output tokens?
-- Grain: one row per request (request_uid) that has prompt_token_ids and output_token_ids.
--
-- Output position t is a repeat(n) when the (n+1)-gram (ctx[-n:], output[t]) occurs
-- inside ctx = prompt + output[:t]; a prompt copy when that occurrence lies in the
-- prompt. Each (n+1)-gram is hashed (ngram_hash, n = repeat_n()); its first
-- occurrence in the request decides both: a repeat when it ends before position t,
-- a prompt copy when it ends inside the prompt. Positions with fewer than n tokens
-- of context are not eligible.
with sequences as (
    select
        request_uid,
        array_length(prompt_token_ids) as prompt_len,
        list_concat(prompt_token_ids, output_token_ids) as s
    from requests
    where prompt_token_ids is not null and output_token_ids is not null
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

first_seen as (
    select request_uid, gram, min(e) as first_e
    from grams
    group by request_uid, gram
),

counts as (
    select
        g.request_uid,
        count(*) filter (where g.e >= g.prompt_len) as eligible_positions,
        count(*) filter (where g.e >= g.prompt_len and f.first_e < g.e) as repeats,
        count(*) filter (where g.e >= g.prompt_len and f.first_e < g.prompt_len) as prompt_copies
    from grams as g
    join first_seen as f on f.request_uid = g.request_uid and f.gram = g.gram
    group by g.request_uid
)

select
    q.deployment_id,
    q.request_uid,
    q.request_id,
    q.category,
    repeat_n() as repeat_n,
    array_length(q.prompt_token_ids) as prompt_len,
    array_length(q.output_token_ids) as output_len,
    coalesce(c.eligible_positions, 0) as eligible_positions,
    coalesce(c.repeats, 0) as repeats,
    coalesce(c.prompt_copies, 0) as prompt_copies,
    c.repeats / nullif(c.eligible_positions, 0) as repeat_ratio,
    c.prompt_copies / nullif(c.eligible_positions, 0) as prompt_copy_ratio
from requests as q
left join counts as c on c.request_uid = q.request_uid
where q.prompt_token_ids is not null and q.output_token_ids is not null
