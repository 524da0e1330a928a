"""# delta_maintenance

Daily: compacts small files in closed partitions of every Delta table (never the open one the
loader writes) and vacuums files older than `loader.vacuum_retention_h`, never below the floor
nor the slowest reader's lag (`kappa maintain`). Reports files and bytes before and after.
"""

from __future__ import annotations

from airflow.sdk import CronTriggerTimetable, dag, task

from jobs.orchestration import tasks
from jobs.orchestration.dagkit import DEFAULT_ARGS, START


@dag(
    dag_id="delta_maintenance",
    schedule=CronTriggerTimetable("30 3 * * *", timezone="UTC"),
    start_date=START,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    doc_md=__doc__,
    tags=["kappa", "delta", "maintenance"],
)
def delta_maintenance():
    @task
    def maintain() -> list[dict]:
        return tasks.maintain_tables()

    maintain()


delta_maintenance()
