"""# reconcile

The lake checks the live views of pipeline `{name}` (`kappa batch reconcile --pipeline {name}`;
its own reconcile, or the engine's over its `reconcile:` section): recomputes from one snapshot of
its loaded tables ({tables}) what Redis holds of its views ({views}) and compares them. Every
difference goes to `ops.reconciliation`, the counts to `platform.metrics`; a difference beyond its
bound (0 for exact counts, 3 standard errors for HyperLogLog) fails the task once, without
retries, with one alert. Runs after the daily batch; runbook: docs/runbooks/views-drift.md.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import CronTriggerTimetable, dag, task

from jobs.batch import tasks
from jobs.orchestration.dagkit import DEFAULT_ARGS, START, delta_tables, listed, stream_pipeline


def reconcile_dag(spec: Any) -> Any:
    """The daily reconcile of the pipeline's live views with the lake."""
    pipeline = spec.name
    views = "; ".join(f"`{name}`: {view.description}" if view.description else f"`{name}`"
                      for name, view in spec.views.items()) or "none"

    @dag(
        dag_id="reconcile",
        schedule=CronTriggerTimetable("30 1 * * *", timezone="UTC"),
        start_date=START,
        catchup=False,
        max_active_runs=1,
        default_args=DEFAULT_ARGS,
        doc_md=__doc__.format(name=pipeline, tables=listed(delta_tables(spec)), views=views),
        tags=["kappa", "batch", "reconcile", "pipeline", pipeline],
    )
    def reconcile():
        @task
        def compare_views() -> dict:
            return tasks.reconcile_views(pipeline=pipeline)

        compare_views()

    return reconcile()


if (PIPELINE := stream_pipeline()) is not None:
    reconcile_dag(PIPELINE)
