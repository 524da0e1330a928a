"""``ops.load_audit`` (one row per table per run) and ``kappa load status``."""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.config.load import KappaConfig
from jobs.lake.delta import app_version, open_delta, table_uri, write_delta
from jobs.lake.storage import storage_options
from jobs.loader.offsets import latest_offsets
from jobs.loader.tables import AUDIT_TABLE, LoadTarget

if TYPE_CHECKING:
    from jobs.loader.load import TableResult

logger = logging.getLogger(__name__)

AUDIT_SCHEMA = pa.schema([
    ("run_id", pa.string()), ("table_name", pa.string()), ("topic", pa.string()),
    ("ranges", pa.string()), ("records_planned", pa.int64()), ("rows_written", pa.int64()),
    ("rows_quarantined", pa.int64()), ("outcome", pa.string()), ("error", pa.string()),
    ("delta_version", pa.int64()), ("until", pa.string()), ("started_at", pa.timestamp("us", "UTC")),
    ("duration_s", pa.float64()), ("write_path", pa.string()),
])


def record(cfg: KappaConfig, run_id: str, started_at: datetime, until: str, result: TableResult) -> None:
    """Append the run's row for one table (after the table's own commit, or its failure)."""
    row = {
        "run_id": run_id, "table_name": result.table, "topic": result.topic,
        "ranges": json.dumps({str(r.partition): [r.start, r.end] for r in result.ranges}),
        "records_planned": sum(r.records for r in result.ranges), "rows_written": result.rows,
        "rows_quarantined": result.quarantined, "outcome": result.outcome, "error": result.error,
        "delta_version": result.version, "until": until, "started_at": started_at,
        "duration_s": result.duration_s, "write_path": result.write_path,
    }
    uri = table_uri(cfg.lake.root, AUDIT_TABLE)
    data = pa.Table.from_pylist([row], schema=AUDIT_SCHEMA)
    write_delta(uri, data, snapshot=None, exclusive_create=False, storage=storage_options(cfg.lake))


def last_runs(cfg: KappaConfig) -> dict[str, dict[str, Any]]:
    """The latest audit row of each table."""
    audit = open_delta(table_uri(cfg.lake.root, AUDIT_TABLE), storage_options(cfg.lake))
    if audit is None:
        return {}
    latest: dict[str, dict[str, Any]] = {}
    for row in sorted(audit.to_pyarrow_table().to_pylist(), key=lambda r: r["started_at"]):
        latest[row["table_name"]] = row
    return latest


def status(cfg: KappaConfig, targets: list[LoadTarget]) -> list[dict[str, Any]]:
    """Per table and topic-partition: loaded offset, earliest/latest, lag in records and seconds."""
    runs = last_runs(cfg)
    rows = []
    for target in targets:
        snapshot = open_delta(target.uri, storage_options(cfg.lake))
        last = runs.get(target.spec.name, {})
        for (topic, partition), (earliest, latest) in sorted(latest_offsets(cfg, target.topic).items()):
            loaded = app_version(snapshot, target.spec.app_id(topic, partition))
            position = earliest if loaded is None else loaded
            lag = max(latest - position, 0)
            rows.append({
                "table": target.spec.name, "topic": topic, "partition": partition,
                "loaded_offset": loaded, "earliest": earliest, "latest": latest, "lag_records": lag,
                "lag_s": _lag_seconds(cfg, topic, partition, position) if lag else 0.0,
                "last_outcome": last.get("outcome"), "last_run_id": last.get("run_id"),
                "last_run_at": last["started_at"].isoformat() if last.get("started_at") else None,
            })
    return rows


def _lag_seconds(cfg: KappaConfig, topic: str, partition: int, offset: int) -> float | None:
    """Age of the oldest record not yet loaded (its Kafka timestamp), or None if unreadable."""
    from confluent_kafka import Consumer, TopicPartition

    props = {**cfg.kafka.client_config(), "group.id": "kappa-loader-status",
             "enable.auto.commit": False, "enable.partition.eof": True}
    consumer = Consumer(props)
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error():
                continue
            _, stamp = message.timestamp()
            return round(max(time.time() - stamp / 1000, 0.0), 3)
    finally:
        consumer.close()
    return None
