"""# batch_gold

Recomputes the RSVP pipeline's gold BI tables `gold.city_daily`, `gold.topic_daily` and
`gold.event_stats` (`kappa batch run --pipeline rsvp`; pipelines/rsvp/gold.py, docs/tables.md)
by whole `event_date` partitions, each replaced in one Delta commit that records the source
versions it read.

* **Daily** (`@daily` data intervals): a run recomputes the date of its interval; Airflow's own
  backfill (UI, `airflow backfill create`, REST) of a date range recomputes those dates, and a
  re-run replaces the same partitions with the same rows.
* **On the loads' Assets** (`silver.rsvps`, `bronze.rsvps_raw`, published by `kafka_to_delta`,
  and by `replay`/`backfill` with the `delta` sink, only when a load changed the table): a run
  recomputes the dates the loads changed (the events' `extra.dates`), so late data re-runs its
  old date.

Publishes each table as an Asset. Runbook: docs/runbooks/airflow.md; drift: docs/runbooks/views-drift.md.
"""

from __future__ import annotations

from airflow.sdk import AssetAny, AssetOrTimeSchedule, CronDataIntervalTimetable, dag, task

from jobs.batch import tasks
from jobs.orchestration.dagkit import DEFAULT_ARGS, START, delta_assets

PIPELINE = "rsvp"
SOURCES = ("silver.rsvps", "bronze.rsvps_raw")


@dag(
    dag_id="batch_gold",
    schedule=AssetOrTimeSchedule(
        timetable=CronDataIntervalTimetable("@daily", timezone="UTC"),
        assets=AssetAny(*[asset for asset in delta_assets() if asset.name in SOURCES])),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    doc_md=__doc__,
    tags=["kappa", "batch", "gold"],
)
def batch_gold():
    def job_task(job: str, table: str):
        @task(task_id=job, outlets=[tasks.job_asset(table)])
        def recompute(dag_run=None, data_interval_start=None, data_interval_end=None,
                      triggering_asset_events=None) -> dict:
            return tasks.recompute(job, dag_run.run_type, data_interval_start, data_interval_end,
                                   tasks.asset_extras(triggering_asset_events), pipeline=PIPELINE)

        return recompute()

    for job, table in (("city_daily", "gold.city_daily"), ("topic_daily", "gold.topic_daily"),
                       ("event_stats", "gold.event_stats")):
        job_task(job, table)


batch_gold()
