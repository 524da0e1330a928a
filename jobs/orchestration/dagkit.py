"""What every DAG shares: default args, the pipeline and its Delta assets, their alias, the kind of a run.

Default args: owner, retries, the alert callback. The hand-written DAGs act on the pipeline
``kappa stream`` runs (:func:`stream_pipeline`); the loads publish the Delta tables they changed
through one alias.

Cheap to import and call at DAG parse time: nothing here touches Spark, Kafka or the network,
and no pipeline's code is imported.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.orchestration.streaming import alert

if TYPE_CHECKING:
    from jobs.pipelines.spec import PipelineSpec

logger = logging.getLogger(__name__)

OWNER = "data-platform"
START = datetime(2026, 1, 1, tzinfo=UTC)
# Every load (kafka_to_delta, and replay/backfill with the delta sink) publishes the tables it
# changed through this alias: one Asset event per changed table, none when nothing changed.
LOADS_ALIAS = "kappa-delta-loads"
# [core] plugins_folder: the plugin that registers the project's timetables (jobs/orchestration/timetables.py)
PLUGINS_FOLDER = Path(__file__).resolve().parent / "airflow_plugins"
DEFAULT_ARGS: dict[str, Any] = {
    "owner": OWNER,
    "retries": 2,
    "retry_delay": timedelta(minutes=1),
    "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=30),
    "on_failure_callback": alert,
}


def asset_uri(table: str) -> str:
    """The Asset URI of a Delta table: ``delta://kappa/<schema>/<table>``."""
    schema, _, name = table.partition(".")
    return f"delta://kappa/{schema}/{name}"


def default_pipeline_name() -> str | None:
    """``pipelines.default`` as the config says it: ``conf/base.yaml``, ``conf/<env>.yaml``, ``KAPPA_*``.

    Only that key is read (the rules of :func:`jobs.config.load.load_config`), so parsing a DAG
    never asks a secrets store. ConfigError when a config file cannot be read.
    """
    from jobs.config import load as config

    environ = dict(os.environ)
    env = environ.get("KAPPA_ENV") or config.DEFAULT_ENV
    raw = config._deep_merge(config._read_yaml(config.conf_dir() / "base.yaml"),
                             config._read_yaml(config.conf_dir() / f"{env}.yaml"))
    config._apply_env_overrides(raw, environ, [])
    name = (raw.get("pipelines") or {}).get("default")
    return str(name) if name else None


def stream_pipeline() -> PipelineSpec | None:
    """The ``pipeline.yaml`` of the default pipeline when ``kappa stream`` runs it (``job: kappa-stream``).

    The pipeline the hand-written DAGs act on (``streaming_lifecycle``, ``batch_gold``, ...), whose
    topics, query and topic-fed tables the config's bottom layer holds. Only the spec file is read.
    None, with one warning, when the config names no such pipeline or its ``pipeline.yaml`` is not
    valid: the DAG file then defines no DAG (``kappa pipelines validate`` says more).
    """
    from jobs.errors import KappaError
    from jobs.pipelines.registry import find, load_spec

    try:
        name = default_pipeline_name()
        if name is None:
            raise KappaError("the config names no default pipeline; set pipelines.default")
        loaded = load_spec(find(name))
    except KappaError as exc:
        logger.warning("no kappa-stream pipeline, so no DAG: %s", exc)
        return None
    if loaded.spec is None or loaded.problems:
        logger.warning("pipeline %s (%s): no DAG, its pipeline.yaml is not valid: %s; run "
                       "`kappa pipelines validate`", loaded.name, loaded.folder, loaded.problems[0])
        return None
    if loaded.spec.streaming.job != "kappa-stream":
        logger.warning("pipeline %s: no DAG, the default pipeline runs on the engine (streaming.job: %s), "
                       "its DAGs are pipeline_%s_*", loaded.name, loaded.spec.streaming.job, loaded.name)
        return None
    return loaded.spec


def delta_tables(spec: PipelineSpec | None, layers: Iterable[str] = ()) -> list[str]:
    """The pipeline's topic-fed tables (``tables:`` entries with ``topic:``), those the loads write.

    Only the tables of ``layers`` (``bronze``, ``silver``, ``gold``, ``ops``) when any is given; in
    the order ``pipeline.yaml`` declares them; none without a pipeline.
    """
    wanted = set(layers)
    return [name for name, table in (spec.tables.items() if spec else ())
            if table.topic and (not wanted or name.partition(".")[0] in wanted)]


def delta_assets(spec: PipelineSpec | None, layers: Iterable[str] = ()) -> list:
    """One ``airflow.sdk.Asset`` per loaded Delta table of :func:`delta_tables` (published by the loads)."""
    from airflow.sdk import Asset

    return [Asset(name=table, uri=asset_uri(table)) for table in delta_tables(spec, layers)]


def gold_tables(spec: PipelineSpec, layer: str) -> dict[str, str]:
    """The pipeline's batch jobs writing tables of ``layer``: gold transform name -> table."""
    return {table.gold: name for name, table in spec.tables.items()
            if table.gold and name.partition(".")[0] == layer}


def listed(names: Iterable[str]) -> str:
    """Names as markdown code, comma-separated, the last after ``and``: ``a``, ``b`` and ``c``."""
    shown = [f"`{name}`" for name in names]
    return " and ".join([", ".join(shown[:-1]), shown[-1]] if len(shown) > 1 else shown) or "none"


def lifecycle_params() -> dict[str, Any]:
    """The params of a live job's lifecycle DAG (``streaming_lifecycle``, ``pipeline_<name>_stream``)."""
    from airflow.sdk import Param

    return {
        "action": Param("ensure", enum=["ensure", "stop"], description="ensure = start if absent"),
        "max_batch_age_s": Param(300, type="number", description="unhealthy if the last batch is older"),
        "max_offsets_behind": Param(1_000_000, type="integer", description="unhealthy above this lag"),
    }


def lifecycle_tasks(ensure: Callable[[], dict], health: Callable[[float, int], dict],
                    stop: Callable[[], dict]) -> None:
    """The tasks of a live job's lifecycle DAG, called inside its ``@dag`` function.

    ``choose`` branches on the ``action`` param (:func:`lifecycle_params`) to ``ensure_running``
    (``ensure()``, retried with backoff), then ``check_health`` (``health(max_batch_age_s,
    max_offsets_behind)``), or to ``stop`` (``stop()``).
    """
    from airflow.sdk import task

    @task.branch
    def choose(params=None) -> str:
        return "stop" if params["action"] == "stop" else "ensure_running"

    @task(retries=5, retry_delay=timedelta(seconds=30), retry_exponential_backoff=True)
    def ensure_running() -> dict:
        return ensure()

    @task(retries=2, retry_delay=timedelta(seconds=60))
    def check_health(params=None) -> dict:
        return health(params["max_batch_age_s"], params["max_offsets_behind"])

    @task(task_id="stop")
    def stop_job() -> dict:
        return stop()

    started = ensure_running()
    choose() >> [started, stop_job()]
    started >> check_health()


def loads_alias() -> Any:
    """The ``airflow.sdk.AssetAlias`` every load task publishes the Delta tables it changed through."""
    from airflow.sdk import AssetAlias

    return AssetAlias(name=LOADS_ALIAS)


def run_kind(run_type: object) -> str:
    """The kind of a DAG run, as a plain name: ``scheduled``, ``manual``, ``backfill``, ``asset_triggered``.

    Tasks get ``dag_run.run_type`` as Airflow's ``DagRunType`` enum, whose ``str()`` is
    ``DagRunType.ASSET_TRIGGERED`` (the Task SDK's) or ``asset_triggered`` (the core's); a
    value, a name or either ``str()`` gives the same kind.
    """
    value = getattr(run_type, "value", run_type)
    return str(value or "").strip().lower().removeprefix("dagruntype.")


def batch_dag(spec: PipelineSpec, layer: str, source_layers: Iterable[str], doc: str) -> Any:
    """``batch_<layer>``: recomputes the pipeline's batch tables of ``layer``, one task per job (its name).

    Daily data intervals, or whenever a load changed one of the topic-fed tables of
    ``source_layers``; each task publishes its table as an Asset. ``doc`` is formatted with the
    pipeline's ``name``, its ``tables``, their ``partitions`` columns and the ``sources`` watched.
    """
    from airflow.sdk import AssetAny, AssetOrTimeSchedule, CronDataIntervalTimetable, dag, task

    from jobs.batch import tasks

    pipeline, jobs, sources = spec.name, gold_tables(spec, layer), delta_assets(spec, source_layers)
    partitions = sorted({spec.tables[table].partition_by for table in jobs.values()})
    doc_md = doc.format(name=pipeline, tables=listed(jobs.values()), partitions=listed(partitions),
                        sources=listed(asset.name for asset in sources))

    @dag(dag_id=f"batch_{layer}", start_date=START, catchup=False, max_active_runs=1,
         default_args=DEFAULT_ARGS,
         schedule=AssetOrTimeSchedule(timetable=CronDataIntervalTimetable("@daily", timezone="UTC"),
                                      assets=AssetAny(*sources)),
         doc_md=doc_md, tags=["kappa", "batch", layer, "pipeline", pipeline])
    def recompute_tables():
        def job_task(job: str, table: str):
            @task(task_id=job, outlets=[tasks.job_asset(table)])
            def recompute(dag_run=None, data_interval_start=None, data_interval_end=None,
                          triggering_asset_events=None) -> dict:
                return tasks.recompute(job, dag_run.run_type, data_interval_start, data_interval_end,
                                       tasks.asset_extras(triggering_asset_events), pipeline=pipeline)

            return recompute()

        for job, table in jobs.items():
            job_task(job, table)

    return recompute_tables()
