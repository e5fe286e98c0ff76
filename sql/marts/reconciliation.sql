-- Do an engine's own channels agree? Per deployment with two or more channels
-- (channel_counts: an engine's log, its responses, Prometheus, the rounds), each
-- channel's accepted and drafted totals over the time span all of them cover.
-- Grain: one row per deployment_id, channel of a deployment with at least two channels.
--
-- The common span is from the latest first time to the earliest last time of the
-- channels, widened by reconciliation_slack_us() on each side: the channels' clocks
-- differ (a llama.cpp response's `created` is a whole second). A row counts when it
-- overlaps the span; a row reaching beyond it (a Prometheus difference over a longer
-- window) counts whole, and extends_beyond_span says so: its counts may hold traffic
-- the other channels did not see. Channels that share no time (has_common_span false)
-- are listed with nothing counted and compared.
--
-- The reference is the most detailed channel (rounds, then an engine's log, then its
-- responses, then Prometheus); every channel's totals are compared with it, and a
-- relative difference above reconciliation_tolerance() in accepted or drafted tokens,
-- or in the mean accept length where both have draft counts, disagrees. Per-position
-- accepted counts are compared where both carry them: intervals' accepted_per_position
-- (where every counted row has it), and the rounds' position_counts when every request
-- with rounds lies inside the span.
with channel_spans as (
    select deployment_id, channel, min(start_us) as first_us, max(end_us) as last_us
    from channel_counts
    group by all
),

spans as (
    select
        deployment_id,
        count(*) as num_channels,
        max(first_us) - reconciliation_slack_us() as span_start_us,
        min(last_us) + reconciliation_slack_us() as span_end_us
    from channel_spans
    group by all
    having count(*) >= 2
),

counted as (
    select
        c.*,
        s.span_start_us,
        s.span_end_us,
        s.num_channels
    from channel_counts as c
    join spans as s using (deployment_id)
    where c.start_us <= s.span_end_us and c.end_us >= s.span_start_us
),

positions as (
    select deployment_id, channel, list(accepted order by position) as accepted_per_position
    from (
        select deployment_id, channel, position, sum(accepted) as accepted
        from (
            -- one unnest, then the list indexed: two unnests side by side zip in DuckDB but
            -- multiply in Spark
            select deployment_id, channel, position, accepted_per_position[position] as accepted
            from (
                select
                    deployment_id,
                    channel,
                    accepted_per_position,
                    unnest(range(1, array_length(accepted_per_position) + 1)) as position
                from counted
                where accepted_per_position is not null
            )
        )
        group by all
    )
    group by all
),

counted_totals as (
    select
        deployment_id,
        channel,
        count(*) as num_rows,
        sum(accepted) as accepted,
        sum(drafted) as drafted,
        -- a draft count is known for the channel when every counted row has one
        case when count(drafts) = count(*) then sum(drafts) end as drafts,
        count(accepted_per_position) = count(*) as positions_complete,
        bool_or(start_us < span_start_us or end_us > span_end_us) as extends_beyond_span,
        min(start_us) as first_us,
        max(end_us) as last_us
    from counted
    group by all
),

totals as (
    -- every channel of the deployment, also when the channels share no time (then no row counts)
    select
        c.deployment_id,
        c.channel,
        s.num_channels,
        s.span_start_us,
        s.span_end_us,
        s.span_start_us <= s.span_end_us as has_common_span,
        coalesce(t.num_rows, 0) as num_rows,
        t.* exclude (deployment_id, channel, num_rows)
    from channel_spans as c
    join spans as s using (deployment_id)
    left join counted_totals as t using (deployment_id, channel)
),

rounds_inside as (
    -- whether every request with rounds lies inside the span: then position_counts,
    -- over all of the deployment's rounds, are the span's
    select s.deployment_id, bool_and(c.start_us >= s.span_start_us and c.end_us <= s.span_end_us) as inside
    from channel_counts as c
    join spans as s using (deployment_id)
    where c.channel = 'rounds'
    group by all
),

round_positions as (
    select p.deployment_id, list(p.accepted order by p.position) as accepted_per_position
    from position_counts as p
    join rounds_inside as i on i.deployment_id = p.deployment_id and i.inside
    where p.context_bucket is null
    group by all
),

channels as (
    select
        t.*,
        case
            when t.channel = 'rounds' then r.accepted_per_position
            when t.positions_complete then p.accepted_per_position
        end as accepted_per_position,
        channel_precedence(t.channel) as precedence
    from totals as t
    left join positions as p using (deployment_id, channel)
    left join round_positions as r on t.channel = 'rounds' and r.deployment_id = t.deployment_id
),

referenced as (
    select
        c.*,
        first_value(c.channel) over w as reference_channel,
        first_value(c.accepted) over w as reference_accepted,
        first_value(c.drafted) over w as reference_drafted,
        first_value(c.drafts) over w as reference_drafts,
        first_value(c.accepted_per_position) over w as reference_positions
    from channels as c
    window w as (partition by c.deployment_id order by c.precedence, c.channel
                 rows between unbounded preceding and unbounded following)
),

compared as (
    select
        *,
        accepted / nullif(drafted, 0) as acceptance_rate,
        1 + accepted / nullif(drafts, 0) as mean_accept_length,
        relative_difference(accepted, reference_accepted) as accepted_difference,
        relative_difference(drafted, reference_drafted) as drafted_difference,
        relative_difference(1 + accepted / nullif(drafts, 0),
                            1 + reference_accepted / nullif(reference_drafts, 0)) as accept_length_difference,
        case
            when accepted_per_position is not null and reference_positions is not null
            then list_transform(
                range(1, greatest(array_length(accepted_per_position), array_length(reference_positions)) + 1),
                lambda i: struct_pack(
                    difference := relative_difference(coalesce(accepted_per_position[i], 0),
                                                      coalesce(reference_positions[i], 0)),
                    disagrees := disagrees_with(coalesce(accepted_per_position[i], 0),
                                                coalesce(reference_positions[i], 0))))
        end as position_checks
    from referenced
)

select
    deployment_id,
    channel,
    reference_channel,
    channel = reference_channel as is_reference,
    num_channels,
    has_common_span,
    make_timestamp(span_start_us) as span_start,
    make_timestamp(span_end_us) as span_end,
    num_rows,
    cast(accepted as bigint) as accepted,
    cast(drafted as bigint) as drafted,
    cast(drafts as bigint) as drafts,
    acceptance_rate,
    mean_accept_length,
    accepted_per_position,
    extends_beyond_span,
    accepted_difference,
    drafted_difference,
    accept_length_difference,
    list_max(list_transform(position_checks, lambda c: abs(c.difference))) as position_difference,
    has_common_span and channel <> reference_channel and (
        disagrees_with(accepted, reference_accepted)
        or disagrees_with(drafted, reference_drafted)
        or disagrees_with(1 + accepted / nullif(drafts, 0), 1 + reference_accepted / nullif(reference_drafts, 0))
        or coalesce(list_max(list_transform(position_checks, lambda c: cast(c.disagrees as integer))) = 1, false)
    ) as disagrees
from compared
