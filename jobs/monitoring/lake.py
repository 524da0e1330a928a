"""Metrics of the slower tiers, read less often than the live job's: loader, reconcile, retention.

Each function reads what its tier publishes and returns metric families:
- :func:`loader_metrics`: ``ops.load_audit``'s last row per table (jobs/loader/audit.py) and the
  table's Delta app transactions against the topic's end offsets;
- :func:`reconcile_metrics`: the newest ``reconciliation`` record on ``platform.metrics``
  (jobs/batch/report.py), looked for in the last :data:`RECONCILE_SCAN` records;
- :func:`retention_metrics`: per topic, seconds until the oldest retained record that a view
  (the Redis fence) or a table (the loader) has not yet taken is deleted.
"""

from __future__ import annotations

import json
import time
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from jobs.config.load import KappaConfig

OUTCOMES = ("committed", "noop", "conflict", "failed_quality", "error")
RECONCILE_SCAN = 5_000  # records of platform.metrics read back looking for the last reconcile
TIMEOUT_S = 5.0
Positions = dict[tuple[str, int], int]


def loader_metrics(cfg: KappaConfig, positions: Positions) -> list[Metric]:
    """Per loaded table: offsets behind, last run's outcome and time, rows written and quarantined.

    Adds each table's lowest loaded offset per partition to ``positions`` (for retention).
    """
    from jobs.lake.delta import app_version, open_delta
    from jobs.lake.storage import storage_options
    from jobs.loader.audit import last_runs
    from jobs.loader.offsets import latest_offsets
    from jobs.loader.tables import targets

    behind = GaugeMetricFamily("kappa_loader_offsets_behind", "Records of the topic not yet in the table",
                               labels=["table", "topic"])
    last_run = GaugeMetricFamily("kappa_loader_last_run_timestamp_seconds",
                                 "Start of the table's last load run (Unix time)", labels=["table"])
    last_commit = GaugeMetricFamily("kappa_loader_last_commit_timestamp_seconds",
                                    "Start of the table's last committed load run (Unix time)",
                                    labels=["table"])
    outcome = GaugeMetricFamily("kappa_loader_last_outcome", "1 for the outcome of the table's last run",
                                labels=["table", "outcome"])
    rows = GaugeMetricFamily("kappa_loader_last_run_rows", "Rows the table's last run wrote",
                             labels=["table"])
    quarantined = GaugeMetricFamily("kappa_loader_last_run_quarantined_rows",
                                    "Rows the table's last run quarantined", labels=["table"])
    runs = last_runs(cfg)
    committed = _last_committed(cfg)
    for target in targets(cfg):
        name = target.spec.name
        snapshot = open_delta(target.uri, storage_options(cfg.lake))
        total = 0
        for (topic, partition), (earliest, latest) in latest_offsets(cfg, target.topic).items():
            loaded = app_version(snapshot, target.spec.app_id(topic, partition))
            position = earliest if loaded is None else max(loaded, earliest)
            total += max(latest - position, 0)
            positions[(topic, partition)] = min(positions.get((topic, partition), position), position)
        behind.add_metric([name, target.topic], total)
        run = runs.get(name)
        if run is not None:
            last_run.add_metric([name], run["started_at"].timestamp())
            for value in OUTCOMES:
                outcome.add_metric([name, value], int(run["outcome"] == value))
            rows.add_metric([name], run["rows_written"] or 0)
            quarantined.add_metric([name], run["rows_quarantined"] or 0)
        if name in committed:
            last_commit.add_metric([name], committed[name])
    return [behind, last_run, last_commit, outcome, rows, quarantined]


def _last_committed(cfg: KappaConfig) -> dict[str, float]:
    """Per table, the start of its last committed run (Unix time), from ``ops.load_audit``."""
    from jobs.lake.delta import open_delta, table_uri
    from jobs.lake.storage import storage_options
    from jobs.loader.tables import AUDIT_TABLE

    audit = open_delta(table_uri(cfg.lake.root, AUDIT_TABLE), storage_options(cfg.lake))
    if audit is None:
        return {}
    table = audit.to_pyarrow_table(columns=["table_name", "outcome", "started_at"])
    out: dict[str, float] = {}
    for row in table.to_pylist():
        if row["outcome"] == "committed":
            stamp = row["started_at"].timestamp()
            out[row["table_name"]] = max(out.get(row["table_name"], stamp), stamp)
    return out


def reconcile_metrics(cfg: KappaConfig) -> list[Metric]:
    """The newest reconcile run's differences and drifts, and when it ran."""
    record = _last_reconcile(cfg)
    differences = GaugeMetricFamily("kappa_reconcile_differences", "Keys whose live value differs "
                                    "from the lake in the last reconcile run")
    drifts = GaugeMetricFamily("kappa_reconcile_drifts", "Drifts (differences beyond tolerance) in the last "
                               "reconcile run")
    at = GaugeMetricFamily("kappa_reconcile_last_run_timestamp_seconds",
                           "When the last reconcile ran (Unix time)")
    if record is not None:
        differences.add_metric([], record.get("differences", 0))
        drifts.add_metric([], record.get("drifts", 0))
        at.add_metric([], record.get("emitted_ms", 0) / 1000)
    return [differences, drifts, at]


def _last_reconcile(cfg: KappaConfig) -> dict[str, Any] | None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    topic = cfg.streaming.metrics_topic
    consumer = Consumer({**cfg.kafka.client_config(), "group.id": "kappa-metrics-reconcile",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        partitions = consumer.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions
        assign, ends = [], {}
        for partition in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)
            if high > low:
                assign.append(TopicPartition(topic, partition, max(low, high - RECONCILE_SCAN)))
                ends[partition] = high
        if not assign:
            return None
        consumer.assign(assign)
        best: dict[str, Any] | None = None
        deadline = time.monotonic() + TIMEOUT_S
        while ends and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.5):
                if message.error() is None and message.key() == b"reconcile":
                    value = json.loads(message.value() or b"{}")
                    if best is None or value.get("emitted_ms", 0) >= best.get("emitted_ms", 0):
                        best = value
                offset = message.offset()
                if message.error() is None and offset is not None and offset + 1 >= ends.get(
                        message.partition() or 0, 0):
                    ends.pop(message.partition() or 0, None)
        return best
    except KafkaException:
        return None
    finally:
        consumer.close()


def retention_metrics(cfg: KappaConfig, positions: Positions) -> list[Metric]:
    """Per topic with a time retention: seconds until its oldest record not yet taken is deleted."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource

    headroom = GaugeMetricFamily("kappa_topic_retention_headroom_seconds",
                                 "Seconds until the topic deletes a record a view or table has not taken",
                                 labels=["topic"])
    retention = GaugeMetricFamily("kappa_topic_retention_seconds", "The topic's retention.ms in seconds",
                                  labels=["topic"])
    topics = sorted({topic for topic, _ in positions})
    if not topics:
        return [headroom, retention]
    admin = AdminClient(cfg.kafka.client_config())
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics])
    retention_ms = {}
    for resource, future in futures.items():
        entry = future.result(timeout=TIMEOUT_S).get("retention.ms")
        if entry is not None and entry.value not in (None, "-1"):
            retention_ms[resource.name] = int(entry.value)
    consumer = Consumer({**cfg.kafka.client_config(), "group.id": "kappa-metrics-retention",
                         "enable.auto.commit": False})
    try:
        now = time.time()
        for topic, ms in sorted(retention_ms.items()):
            retention.add_metric([topic], ms / 1000)
            stamps = [_timestamp_at(consumer, TopicPartition(topic, p, at))
                      for (t, p), at in positions.items() if t == topic]
            known = [s for s in stamps if s is not None]
            if known:
                headroom.add_metric([topic], min(known) / 1000 + ms / 1000 - now)
    finally:
        consumer.close()
    return [headroom, retention]


def _timestamp_at(consumer: Any, tp: Any) -> float | None:
    """The Kafka timestamp (ms) of the record at ``tp.offset``; None when there is none yet."""
    _, high = consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S, cached=False)
    if tp.offset >= high:
        return None
    consumer.assign([tp])
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            return float(message.timestamp()[1])
    return None


def scrape_errors(errors: dict[str, int]) -> Metric:
    """Failed reads per source since the exporter started."""
    family = CounterMetricFamily("kappa_exporter_read_errors", "Reads of a source that failed",
                                 labels=["source"])
    for source, count in sorted(errors.items()):
        family.add_metric([source], count)
    return family
