"""Topics declared in conf/ applied idempotently, and listed with their offsets.

``apply`` creates missing topics, aligns topic configs (retention, cleanup policy) and reports
drift it cannot fix safely: fewer partitions than declared (adding partitions moves keys to
other partitions, so it only happens with ``allow_partition_increase``), more partitions than
declared (Kafka cannot remove partitions) and a different replication factor.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from jobs.config.load import KafkaConfig, TopicSpec
from jobs.errors import KappaError

logger = logging.getLogger(__name__)
# librdkafka's own log lines (broker down: one per reconnect attempt) go through Python logging;
# the CLI shows them with -v only.
LIBRDKAFKA_LOGGER = logging.getLogger("jobs.kafka.librdkafka")

ADMIN_TIMEOUT_S = 15.0
MANAGED_CONFIGS = ("retention.ms", "cleanup.policy")


@dataclass
class TopicResult:
    """What ``apply`` did to one topic."""

    name: str
    action: str  # created | unchanged | updated | drift
    changes: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PartitionInfo:
    """Offsets of one partition."""

    partition: int
    earliest: int
    latest: int


@dataclass(frozen=True)
class TopicInfo:
    """What ``kappa topics list`` shows for one topic."""

    name: str
    partitions: list[PartitionInfo]
    retention_ms: str
    cleanup_policy: str

    @property
    def records(self) -> int:
        """Records currently retained (latest minus earliest, summed)."""
        return sum(p.latest - p.earliest for p in self.partitions)


def admin_client(kafka: KafkaConfig) -> AdminClient:
    """An AdminClient for the configured cluster."""
    return AdminClient(client_props(kafka))


def client_props(kafka: KafkaConfig) -> dict[str, Any]:
    """Client properties with the client's logs routed to :data:`LIBRDKAFKA_LOGGER`."""
    return {**kafka.client_config(), "logger": LIBRDKAFKA_LOGGER}


def apply_topics(
    kafka: KafkaConfig, topics: Mapping[str, TopicSpec], allow_partition_increase: bool = False
) -> list[TopicResult]:
    """Create missing topics and align configs; return one result per declared topic."""
    admin = admin_client(kafka)
    existing = _metadata(admin).topics
    results: list[TopicResult] = []
    missing = [name for name in topics if name not in existing]
    if missing:
        futures = admin.create_topics([
            NewTopic(name, topics[name].partitions, topics[name].replication_factor,
                     config=topics[name].topic_config())
            for name in missing])
        for name, future in futures.items():
            _wait(future, f"create topic {name}")
            results.append(TopicResult(name, "created", [f"{topics[name].partitions} partitions"]))
    for name in (n for n in topics if n in existing):
        results.append(_align(admin, name, topics[name], existing[name], allow_partition_increase))
    order = list(topics)
    return sorted(results, key=lambda r: order.index(r.name))


def _align(admin: AdminClient, name: str, spec: TopicSpec, metadata, allow_increase: bool) -> TopicResult:
    result = TopicResult(name, "unchanged")
    actual = len(metadata.partitions)
    if actual < spec.partitions and allow_increase:
        _wait(admin.create_partitions([NewPartitions(name, spec.partitions)])[name],
              f"add partitions to {name}")
        result.changes.append(f"partitions {actual} -> {spec.partitions}")
    elif actual != spec.partitions:
        hint = " (re-run with --allow-partition-increase)" if actual < spec.partitions else ""
        result.drift.append(f"partitions: declared {spec.partitions}, actual {actual}{hint}")
    replicas = {len(p.replicas) for p in metadata.partitions.values()}
    if replicas and replicas != {spec.replication_factor}:
        result.drift.append(
            f"replication factor: declared {spec.replication_factor}, actual {sorted(replicas)}")
    current = describe_topic_configs(admin, name)
    wanted = spec.topic_config()
    stale = {k: v for k, v in wanted.items() if current.get(k) != v}
    if stale:
        resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in stale.items()])
        try:
            _wait(admin.incremental_alter_configs([resource])[resource], f"alter configs of {name}")
            result.changes += [f"{k} {current.get(k)} -> {v}" for k, v in stale.items()]
        except KappaError as exc:
            result.drift += [f"{k}: declared {v}, actual {current.get(k)} ({exc})" for k, v in stale.items()]
    if result.drift:
        result.action = "drift"
    elif result.changes:
        result.action = "updated"
    return result


def describe_topic_configs(admin: AdminClient, name: str) -> dict[str, str]:
    """The current values of the topic configs this module manages."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    entries = _wait(admin.describe_configs([resource])[resource], f"describe configs of {name}")
    return {key: entry.value for key, entry in entries.items() if key in MANAGED_CONFIGS}


def list_topics(kafka: KafkaConfig, names: list[str] | None = None) -> list[TopicInfo]:
    """Partitions, earliest/latest offsets and retention of the given (or all user) topics."""
    admin = admin_client(kafka)
    metadata = _metadata(admin).topics
    wanted = names if names is not None else sorted(n for n in metadata if not n.startswith("__"))
    consumer = Consumer({**client_props(kafka), "group.id": "kappa-topics-list",
                         "enable.auto.commit": "false"})
    try:
        infos = []
        for name in wanted:
            if name not in metadata:
                continue
            parts = []
            for pid in sorted(metadata[name].partitions):
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(name, pid), timeout=ADMIN_TIMEOUT_S)
                parts.append(PartitionInfo(pid, low, high))
            configs = describe_topic_configs(admin, name)
            infos.append(TopicInfo(name, parts, configs.get("retention.ms", "?"),
                                   configs.get("cleanup.policy", "?")))
        return infos
    finally:
        consumer.close()


def _metadata(admin: AdminClient):
    try:
        return admin.list_topics(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        admin.poll(0)  # hands librdkafka's queued log lines to LIBRDKAFKA_LOGGER (shown with -v)
        raise KappaError(f"cannot reach Kafka to read topic metadata: {exc.args[0]}; "
                         "is the broker up (`kappa stack status`)?") from None


def _wait(future, what: str):
    try:
        return future.result(timeout=ADMIN_TIMEOUT_S)
    except KafkaException as exc:
        raise KappaError(f"{what} failed: {exc.args[0]}") from None
    except TimeoutError:
        raise KappaError(f"{what} timed out after {ADMIN_TIMEOUT_S}s") from None
