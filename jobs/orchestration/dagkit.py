"""What every DAG shares: default args, the Delta assets and their alias, the kind of a run.

Default args: owner, retries, the alert callback. The loads publish the Delta tables they
changed through one alias.

Cheap to import at DAG parse time: nothing here touches Spark, Kafka or the network.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jobs.orchestration.streaming import alert

OWNER = "data-platform"
START = datetime(2026, 1, 1, tzinfo=UTC)
# The loader's tables (conf loader.tables; docs/tables.md): one Airflow Asset each.
DELTA_TABLES = ("bronze.rsvps_raw", "ops.dlq", "silver.rsvps", "gold.rsvp_summaries")
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


def delta_assets() -> list:
    """One ``airflow.sdk.Asset`` per loaded Delta table (published by ``kafka_to_delta``)."""
    from airflow.sdk import Asset

    return [Asset(name=table, uri=asset_uri(table)) for table in DELTA_TABLES]


def lifecycle_params() -> dict[str, Any]:
    """The params of a live job's lifecycle DAG (``streaming_lifecycle``, ``pipeline_<name>_stream``)."""
    from airflow.sdk import Param

    return {
        "action": Param("ensure", enum=["ensure", "stop"], description="ensure = start if absent"),
        "max_batch_age_s": Param(300, type="number", description="unhealthy if the last batch is older"),
        "max_offsets_behind": Param(1_000_000, type="integer", description="unhealthy above this lag"),
    }


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
