-- The steps that carry their own token counts, of the deployments without rounds (engine
-- iteration lines: docs/trace-format.md, "Token counts without rounds"). A deployment with
-- rounds takes its tokens from them; its steps' counts are only checked.
-- Grain: one row per (deployment_id, step_uid) of a clean step with num_committed_tokens,
-- of a deployment that has no clean rounds.
with with_rounds as (
    select distinct deployment_id
    from step_rounds
)

select s.*
from steps as s
left join with_rounds as w on w.deployment_id = s.deployment_id
where w.deployment_id is null
    and s.num_committed_tokens is not null
