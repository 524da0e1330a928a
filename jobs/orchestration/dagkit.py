"""What every DAG shares: default args (owner, retries, the alert callback) and the Delta assets.

Cheap to import at DAG parse time: nothing here touches Spark, Kafka or the network.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from jobs.orchestration.streaming import alert

OWNER = "data-platform"
START = datetime(2026, 1, 1, tzinfo=UTC)
# The loader's tables (conf loader.tables; docs/tables.md): one Airflow Asset each.
DELTA_TABLES = ("bronze.rsvps_raw", "ops.dlq", "silver.rsvps", "gold.rsvp_summaries")
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
