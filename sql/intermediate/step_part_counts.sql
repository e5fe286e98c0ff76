-- How many steps cannot split their time into draft, verify and other: the parts
-- overlap (asynchronous drafting), or a part is unknown. The report notes both.
-- Grain: one row per deployment_id with steps.
select
    deployment_id,
    count(*) as num_steps,
    count(*) filter (where draft_ms + verify_ms > duration_ms) as overlapping_steps,
    count(*) filter (where draft_ms is null or verify_ms is null) as steps_without_parts
from steps
group by deployment_id
