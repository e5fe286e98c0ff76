-- Requests whose output_tokens disagree with their clean rounds (docs/trace-format.md,
-- output_tokens_mismatch): the first output token comes from the prefill, so a request's
-- rounds commit output_tokens − 1 tokens in all. A request whose rounds were partly lost
-- (or rejected) commits fewer; its rounds stay analysed, and the report counts it.
-- Grain: one row per requests row with output_tokens <> 1 + Σ num_committed_tokens of its
-- clean rounds.
--
-- Checked: the requests of the deployments that have clean rounds (a response or log
-- import without rounds has nothing to sum). A request without clean rounds and with
-- output_tokens = 0 failed before its first token: it generated nothing, and agrees.
-- The sums come from request_rounds, computed once per request: no pass over the rounds.
-- checked_requests: the requests of the deployment that were checked, the denominator.
with checked as (
    select
        q.deployment_id,
        q.request_uid,
        q.request_id,
        q.output_tokens,
        cast(coalesce(r.num_committed_tokens, 0) as bigint) as committed_tokens,
        coalesce(r.num_rounds, 0) as clean_rounds,
        count(*) over (partition by q.deployment_id) as checked_requests
    from requests as q
    semi join (select distinct deployment_id from request_rounds) as d on d.deployment_id = q.deployment_id
    left join request_rounds as r on r.request_uid = q.request_uid
)

select
    c.deployment_id,
    c.request_id,
    p.partition,
    -- the key as rejected_rows.row_key spells it, partition values included
    concat_ws(', ', 'deployment_id=' || c.deployment_id, 'request_id=' || c.request_id, p.partition) as request_key,
    c.output_tokens,
    1 + c.committed_tokens as rounds_output_tokens,
    c.clean_rounds,
    c.checked_requests
from checked as c
left join request_partitions as p on p.request_uid = c.request_uid
where c.output_tokens <> 1 + c.committed_tokens
    and not (c.clean_rounds = 0 and c.output_tokens = 0)
