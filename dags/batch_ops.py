"""# batch_ops

Recomputes the RSVP pipeline's `ops.dlq_daily` (dead letters per date, reason code and source;
`kappa batch run dlq_daily --pipeline rsvp`) by whole `dlq_date` partitions, one Delta commit per
run recording the `ops.dlq` version it read: daily (`@daily` data intervals, so Airflow's
backfill recomputes date ranges) and whenever a load changed `ops.dlq` (`kafka_to_delta`; the
dates the load changed, from the Asset event's `extra.dates`). Publishes `ops.dlq_daily` as an
Asset. Runbook: docs/runbooks/dlq-growing.md.
"""

from __future__ import annotations

from airflow.sdk import AssetAny, AssetOrTimeSchedule, CronDataIntervalTimetable, dag, task

from jobs.batch import tasks
from jobs.orchestration.dagkit import DEFAULT_ARGS, START, delta_assets


@dag(
    dag_id="batch_ops",
    schedule=AssetOrTimeSchedule(
        timetable=CronDataIntervalTimetable("@daily", timezone="UTC"),
        assets=AssetAny(*[asset for asset in delta_assets() if asset.name == "ops.dlq"])),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    doc_md=__doc__,
    tags=["kappa", "batch", "ops"],
)
def batch_ops():
    @task(outlets=[tasks.job_asset("ops.dlq_daily")])
    def dlq_daily(dag_run=None, data_interval_start=None, data_interval_end=None,
                  triggering_asset_events=None) -> dict:
        return tasks.recompute("dlq_daily", dag_run.run_type, data_interval_start, data_interval_end,
                               tasks.asset_extras(triggering_asset_events), pipeline="rsvp")

    dlq_daily()


batch_ops()
