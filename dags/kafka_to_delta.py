"""# kafka_to_delta

Loads every enabled Kafka topic into its Delta table (`kappa load`: from the offsets recorded
in each table up to the latest offsets, one Delta commit per table with its offsets, data
quality validated before the commit), then publishes each table **the load changed** as an
Airflow Asset (`delta://kappa/<schema>/<table>`, through the alias `kappa-delta-loads`), on which
`data_quality` and the batch DAGs are scheduled; a run that loaded nothing publishes nothing.
Each Asset event's `extra` names the date partitions the load changed (`dates`) and the
versions it committed (`versions`): `batch_gold` and `batch_ops` recompute those dates.

A run that fails its quality gate under policy `fail` commits nothing and fails the task;
under `quarantine` the bad rows go to `quarantine.<table>`. Runbook: docs/runbooks/loader.md.
"""

from __future__ import annotations

from airflow.sdk import CronTriggerTimetable, dag, task

from jobs.batch import tasks as batch_tasks
from jobs.orchestration import tasks
from jobs.orchestration.dagkit import DEFAULT_ARGS, START, loads_alias


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

    @task(outlets=[loads_alias()])
    def publish_assets(results: list[dict], outlet_events=None) -> list[dict]:
        return batch_tasks.publish_load_events(results, outlet_events)

    publish_assets(load())


kafka_to_delta()
