"""# pipeline_factory

The DAG factory: for every valid pipeline the engine runs (`streaming.job: engine`, found as
`kappa pipelines list` finds them), the DAGs `pipeline_<name>_<what>`, tagged
`["kappa", "pipeline", <name>, <what>]`, from its `pipeline.yaml` alone (no pipeline code and
nothing heavy is imported at parse time):

* `pipeline_<name>_stream`: every 5 minutes, keeps the live run up, checks its health, `stop` action;
* `pipeline_<name>_load`: on `schedules.load`, `kappa pipelines load NAME`;
* `pipeline_<name>_gold`: on `schedules.gold`, `kappa pipelines gold NAME --date <interval date>`,
  when the pipeline declares gold tables;
* `pipeline_<name>_reconcile`: daily, `kappa pipelines reconcile NAME`, when it declares `reconcile`.

A pipeline whose `pipeline.yaml` or schedules are invalid gets no DAG (one warning in the
processor's log; `kappa pipelines validate`). The tasks: jobs/orchestration/pipeline_tasks.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from airflow.sdk import CronDataIntervalTimetable, CronTriggerTimetable, dag, task

from jobs.orchestration import pipeline_tasks
from jobs.orchestration.dagkit import DEFAULT_ARGS, START, lifecycle_params, lifecycle_tasks

logger = logging.getLogger(__name__)

STREAM_EVERY = timedelta(minutes=5)
RECONCILE_CRON = "30 2 * * *"  # daily, after the gold run of the day before
DOCS = {
    "stream": """Keeps the live run of pipeline `{name}` (`kappa pipelines run {name}`: the query of its
current view version) running, checks its health from its metrics, and stops it for maintenance.

* **ensure_running**: starts the run detached (log: `<stack data_dir>/logs/stream-<query>.log`)
  when no process holds the query's lock (idempotent); a failed start is retried with backoff.
* **check_health**: age of the run's last batch (`HGET <prefix>:metrics <query>`, only batches
  emitted since the process started) and records behind the source's latest offsets; a run that
  is not there fails at once, without retries (the next run starts it).
* **stop**: trigger with `{{"action": "stop"}}`: SIGTERM, the run finishes its batch and exits.
""",
    "load": """Loads pipeline `{name}`'s topic-fed tables ({tables}) up to the latest offsets
(`kappa pipelines load {name}`), exactly once, on `schedules.load` (`{schedule}`).
""",
    "gold": """Recomputes pipeline `{name}`'s gold tables ({tables}) for the date of each run's data
interval (`kappa pipelines gold {name} --date <date>`) on `schedules.gold` (`{schedule}`); a
re-run or an Airflow backfill of a date range replaces the same partitions.
""",
    "reconcile": """The lake checks pipeline `{name}`'s live views ({views}): `kappa pipelines reconcile
{name}`, daily (`{schedule}`); a drift (exit 6) fails the task at once, without retries.
""",
}


def _dag_args(spec: Any, what: str, schedule: Any, summary: dict[str, str]) -> dict[str, Any]:
    dag_id = f"pipeline_{spec.name}_{what}"
    body = DOCS[what].format(name=spec.name, **summary)
    doc = f"# {dag_id}\n\n{spec.description or spec.name}\n\n{body}\nRunbook: docs/runbooks/pipelines.md."
    return {"dag_id": dag_id, "schedule": schedule, "start_date": START, "catchup": False,
            "max_active_runs": 1, "default_args": DEFAULT_ARGS, "doc_md": doc,
            "tags": ["kappa", "pipeline", spec.name, what]}


def stream_dag(spec: Any) -> Any:
    """``pipeline_<name>_stream``: ensure the live run, check its health; or stop it."""
    name = spec.name

    @dag(**_dag_args(spec, "stream", STREAM_EVERY, {}), params=lifecycle_params())
    def stream():
        lifecycle_tasks(lambda: pipeline_tasks.ensure_running(name),
                        lambda age, behind: pipeline_tasks.check_health(name, age, behind),
                        lambda: pipeline_tasks.stop_running(name))

    return stream()


def command_dag(spec: Any, what: str, schedule: Any, summary: dict[str, str],
                call: Callable[[Any], Any]) -> Any:
    """``pipeline_<name>_<what>``: one task ``<what>`` running ``call(data_interval_start)``."""

    @dag(**_dag_args(spec, what, schedule, summary))
    def generated():
        @task(task_id=what)
        def run(data_interval_start=None) -> Any:
            return call(data_interval_start)

        run()

    return generated()


def _tables(spec: Any, kind: str) -> str:
    return ", ".join(sorted(name for name, table in spec.tables.items() if getattr(table, kind))) or "none"


def pipeline_dags(spec: Any) -> list[Any]:
    """Every DAG of one pipeline; none when its schedules are not valid cron expressions."""
    load_schedule = CronTriggerTimetable(spec.schedules.load, timezone="UTC")
    gold_schedule = CronDataIntervalTimetable(spec.schedules.gold, timezone="UTC")
    try:
        load_schedule.validate()
        gold_schedule.validate()
    except Exception as exc:  # one bad pipeline must not break the others' DAGs
        logger.warning("pipeline %s: no DAGs, its schedules are not valid (%s); fix `schedules:` in its "
                       "pipeline.yaml", spec.name, exc)
        return []
    name = spec.name
    made = [stream_dag(spec), command_dag(
        spec, "load", load_schedule, {"tables": _tables(spec, "topic"), "schedule": spec.schedules.load},
        lambda _: pipeline_tasks.load(name))]
    if any(table.gold for table in spec.tables.values()):
        made.append(command_dag(
            spec, "gold", gold_schedule, {"tables": _tables(spec, "gold"), "schedule": spec.schedules.gold},
            lambda start: pipeline_tasks.gold(name, start.strftime("%Y-%m-%d"))))
    if spec.reconcile:
        made.append(command_dag(
            spec, "reconcile", CronTriggerTimetable(RECONCILE_CRON, timezone="UTC"),
            {"views": ", ".join(sorted(spec.reconcile)), "schedule": RECONCILE_CRON},
            lambda _: pipeline_tasks.reconcile(name)))
    return made


for _spec in pipeline_tasks.engine_specs():
    for _made in pipeline_dags(_spec):
        globals()[_made.dag_id] = _made
