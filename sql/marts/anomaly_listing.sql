-- The requests to look at that a report lists: of each deployment's flagged requests of
-- each kind (request_anomalies), the listed_per_kind() largest by value, ties by
-- request_id, then partition. anomaly_checks counts every flagged request; the listing
-- is bounded, so what a scale-out engine brings back does not grow with the traffic.
-- Grain: one row per (deployment_id, kind, rank), rank 1 … listed_per_kind().
with ranked as (
    select
        *,
        row_number() over (partition by deployment_id, kind
                           order by value desc, request_id, partition nulls first) as rank
    from request_anomalies
)

select deployment_id, kind, rank, request_id, partition, value, threshold, detail
from ranked
where rank <= listed_per_kind()
