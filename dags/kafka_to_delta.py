"""# kafka_to_delta

Loads every enabled Kafka topic into its Delta table (`kappa load`: from the offsets recorded
in each table up to the latest offsets, one Delta commit per table with its offsets, data
quality validated before the commit), then publishes each table as an Airflow Asset
(`delta://kappa/<schema>/<table>`), on which `data_quality` and the batch DAGs are scheduled.
Each Asset event's `extra` names the date partitions the load changed (`dates`) and the
versions it committed (`versions`): `batch_gold` and `batch_ops` recompute those dates.

A run that fails its quality gate under policy `fail` commits nothing and fails the task;
under `quarantine` the bad rows go to `quarantine.<table>`. Runbook: docs/runbooks/loader.md.
"""

from __future__ import annotations

from airflow.sdk import CronTriggerTimetable, dag, task

from jobs.batch import tasks as batch_tasks
from jobs.orchestration import tasks
from jobs.orchestration.dagkit import DEFAULT_ARGS, START, delta_assets


@dag(
    dag_id="kafka_to_delta",
    schedule=CronTriggerTimetable("*/15 * * * *", timezone="UTC"),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    doc_md=__doc__,
    tags=["kappa", "loader", "delta"],
)
def kafka_to_delta():
    @task
    def load() -> list[dict]:
        return tasks.load_tables()

    @task(outlets=delta_assets())
    def publish_assets(results: list[dict], outlet_events=None) -> list[str]:
        batch_tasks.publish_load_events(results, outlet_events, delta_assets())
        return sorted({row["table"] for row in results})

    publish_assets(load())


kafka_to_delta()
