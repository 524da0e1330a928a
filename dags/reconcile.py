"""# reconcile

The lake checks the RSVP pipeline's live views (`kappa batch reconcile --pipeline rsvp`;
pipelines/rsvp/reconcile.py): recomputes from one snapshot of
`bronze.rsvps_raw`, `silver.rsvps` and `ops.dlq` what Redis holds (city windows, distinct
members per window, per-event responses, all-time topics) and compares it with Redis and with
`gold.rsvp_summaries`. Every difference goes to `ops.reconciliation`, the counts to
`platform.metrics`; a difference beyond its bound (0 for exact counts, 3 standard errors for
HyperLogLog) fails the task once, without retries, with one alert. Runs after the daily batch;
runbook: docs/runbooks/views-drift.md.
"""

from __future__ import annotations

from airflow.sdk import CronTriggerTimetable, dag, task

from jobs.batch import tasks
from jobs.orchestration.dagkit import DEFAULT_ARGS, START


@dag(
    dag_id="reconcile",
    schedule=CronTriggerTimetable("30 1 * * *", timezone="UTC"),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    doc_md=__doc__,
    tags=["kappa", "batch", "reconcile"],
)
def reconcile():
    @task
    def compare_views() -> dict:
        return tasks.reconcile_views(pipeline="rsvp")

    compare_views()


reconcile()
