"""View versions: every derived output set has a version, one pointer names the current one.

A *view version* N names a full set of outputs derived from the log by the streaming job and
the loader (docs/reprocess.md):

- the Redis summaries under ``<redis_prefix>`` (N = 1) or ``<redis_prefix>-v<N>``;
- the job's output topics (analyzed records, summaries, dead letters: ``streaming.*_topic``)
  (N = 1) or the same names with ``.v<N>``;
- the Delta tables loaded from those topics (``<schema>.<table>`` or ``<schema>.<table>_v<N>``);
- the live query ``<query_name>`` or ``<query_name>-v<N>`` and its checkpoint.

Version 1 is today's names, so a platform that never reprocessed has nothing to move. The
pointer is the latest record of key ``current`` on the compacted topic ``streaming.views_topic``
(``platform.views``): one produce switches every reader at once, it lives in the log like the data
(a lost Redis keeps it), and every reader can see it. Records ``version/<N>`` describe each
version (building, current, previous, retired). No record at all means version 1.

Metrics and errors (``platform.metrics``, ``platform.errors``) are shared: every record names its
query, which names its version.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from jobs.config.load import KappaConfig
from jobs.errors import KappaError

logger = logging.getLogger(__name__)

TIMEOUT_S = 15.0
CURRENT_KEY = "current"
BUILDING, CURRENT, PREVIOUS, RETIRED = "building", "current", "previous", "retired"


class ViewsError(KappaError):
    """The view pointer could not be read or moved."""


@dataclass(frozen=True)
class Views:
    """The pointer's topic as read: the current version and what is known of each version."""

    current: int = 1
    versions: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)

    def state(self, version: int) -> str:
        """``building`` / ``current`` / ``previous`` / ``retired`` (version 1 is current by default)."""
        if version == self.current:
            return CURRENT
        recorded = self.versions.get(version, {}).get("state")
        return str(recorded) if recorded else (PREVIOUS if version == 1 else "unknown")

    def live(self) -> list[int]:
        """Versions whose outputs exist: the current one and any being built or kept."""
        return sorted({self.current, *(v for v, info in self.versions.items()
                                       if info.get("state") in (BUILDING, CURRENT, PREVIOUS))})


def suffix(version: int) -> str:
    """The suffix of version N's topic names (none for version 1)."""
    return "" if version == 1 else f".v{version}"


def version_config(cfg: KappaConfig, version: int) -> KappaConfig:
    """The config of view version ``version``: its prefix, topics, tables and query name."""
    if version < 1:
        raise ViewsError(f"view version {version}: versions start at 1")
    if version == 1:
        return cfg
    s, end = cfg.streaming, suffix(version)
    renamed = {s.analyzed_topic: s.analyzed_topic + end, s.summaries_topic: s.summaries_topic + end,
               s.dlq_topic: s.dlq_topic + end}
    streaming = s.model_copy(update={
        "analyzed_topic": renamed[s.analyzed_topic], "summaries_topic": renamed[s.summaries_topic],
        "dlq_topic": renamed[s.dlq_topic], "query_name": f"{s.query_name}-v{version}",
        "redis_prefix": f"{s.redis_prefix}-v{version}"})
    tables = {(f"{name}_v{version}" if spec.topic in renamed else name):
              (spec.model_copy(update={"topic": renamed[spec.topic]}) if spec.topic in renamed else spec)
              for name, spec in cfg.loader.tables.items()}
    serve = cfg.serve.model_copy(update={
        "analyzed_topic": renamed.get(cfg.serve.analyzed_topic or "", cfg.serve.analyzed_topic),
        "summaries_topic": renamed.get(cfg.serve.summaries_topic or "", cfg.serve.summaries_topic)})
    topics = {**cfg.topics, **{renamed[name]: spec for name, spec in cfg.topics.items() if name in renamed}}
    return cfg.model_copy(update={"streaming": streaming, "serve": serve, "topics": topics,
                                  "loader": cfg.loader.model_copy(update={"tables": tables})})


def table_aliases(cfg: KappaConfig, version: int) -> dict[str, str]:
    """Base table name -> version ``version``'s table name (``kappa sql`` reads the base names)."""
    versioned = version_config(cfg, version)
    base = list(cfg.loader.tables)
    return {name: other for name, other in zip(base, versioned.loader.tables, strict=True)}


def live_tables(cfg: KappaConfig) -> dict[str, Any]:
    """The loader's tables of every version with outputs (a retired version's are left out)."""
    tables: dict[str, Any] = {}
    for version in read_views(cfg).live():
        tables.update(version_config(cfg, version).loader.tables)
    return tables


def read_views(cfg: KappaConfig, timeout_s: float = TIMEOUT_S, scope: str = "") -> Views:
    """Read the pointer topic (no topic or no record: version 1 is current).

    ``timeout_s`` bounds the metadata and offsets requests (a caller that has a fallback when
    Kafka is down gives a short one). ``scope`` is the key prefix of one pipeline's records
    (``<name>/``; the ``kappa stream`` job's records have none).
    """
    from jobs.kafka.client import LIBRDKAFKA_LOG

    topic = cfg.streaming.views_topic
    consumer = Consumer({**cfg.kafka.client_config(), "group.id": "kappa-views", "enable.auto.commit": False,
                         "enable.partition.eof": False, "logger": LIBRDKAFKA_LOG})
    latest: dict[str, Any] = {}
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            return Views()
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s, cached=False)
        if high <= low:
            return Views()
        consumer.assign([TopicPartition(topic, 0, low)])
        position, deadline = low, time.monotonic() + TIMEOUT_S
        while position < high:
            if time.monotonic() > deadline:
                raise ViewsError(f"the view pointer topic {topic} could not be read to offset {high} "
                                 f"in {TIMEOUT_S:.0f} s (at {position}); check Kafka")
            for message in consumer.consume(500, timeout=1.0):
                if message.error() is not None:
                    continue
                position = max(position, int(message.offset() or 0) + 1)
                key, value = message.key(), message.value()
                if key is not None and value is not None and _in_scope(key.decode(), scope):
                    latest[key.decode().removeprefix(scope)] = json.loads(value)
    except KafkaException as exc:
        raise ViewsError(f"the view pointer topic {topic} could not be read ({exc}); check Kafka") from None
    finally:
        consumer.close()
    current = int(latest.get(CURRENT_KEY, {}).get("version", 1))
    versions = {int(key.split("/", 1)[1]): value for key, value in latest.items()
                if key.startswith("version/")}
    return Views(current=current, versions=versions)


def _in_scope(key: str, scope: str) -> bool:
    """Whether a pointer record belongs to ``scope`` (the unscoped one: keys without a ``/`` scope)."""
    rest = key.removeprefix(scope) if key.startswith(scope) else None
    return rest is not None and (rest == CURRENT_KEY or rest.startswith("version/"))


def current_version(cfg: KappaConfig) -> int:
    """The version every reader follows."""
    return read_views(cfg).current


def current_config(cfg: KappaConfig) -> KappaConfig:
    """The config of the current view version."""
    return version_config(cfg, current_version(cfg))


def record_version(cfg: KappaConfig, version: int, state: str, scope: str = "", **details: Any) -> None:
    """Record what is known of a version (its state and details) on the pointer topic."""
    _produce(cfg, {f"{scope}version/{version}": {"version": version, "state": state,
                                                  "updated_ms": int(time.time() * 1000), **details}})


def switch_current(cfg: KappaConfig, version: int, previous: int, scope: str = "",
                   details: Mapping[int, Mapping[str, Any]] | None = None) -> None:
    """Make ``version`` current: one record that every reader follows; ``previous`` is kept.

    ``details``: what else each version's record keeps (a pipeline version's params).
    """
    now = int(time.time() * 1000)
    kept = details or {}
    _produce(cfg, {
        f"{scope}version/{previous}": {**kept.get(previous, {}), "version": previous, "state": PREVIOUS,
                                       "updated_ms": now},
        f"{scope}version/{version}": {**kept.get(version, {}), "version": version, "state": CURRENT,
                                      "updated_ms": now},
        f"{scope}{CURRENT_KEY}": {"version": version, "previous": previous, "switched_ms": now}})


def _produce(cfg: KappaConfig, records: Mapping[str, Mapping[str, Any]]) -> None:
    producer = Producer({**cfg.kafka.client_config(), "enable.idempotence": True, "acks": "all"})
    for key, value in records.items():
        producer.produce(cfg.streaming.views_topic, key=key.encode(), value=json.dumps(value).encode(),
                         partition=0)
    if producer.flush(TIMEOUT_S):
        raise ViewsError(f"the view pointer topic {cfg.streaming.views_topic} did not take the write in "
                         f"{TIMEOUT_S:.0f} s; nothing switched: check Kafka and retry")


class ViewsWatcher:
    """Notices a move of the pointer cheaply: the topic's end offset each poll, a read when it moved.

    For long-lived readers (``kappa serve``): one consumer kept, one metadata request per poll.
    """

    def __init__(self, cfg: KappaConfig) -> None:
        self.cfg = cfg
        self._consumer: Consumer | None = None
        self._high: int | None = None

    def poll(self) -> Views | None:
        """The views when the pointer topic grew since the last poll, else None."""
        if self._consumer is None:
            self._consumer = Consumer({**self.cfg.kafka.client_config(), "group.id": "kappa-views-watch",
                                       "enable.auto.commit": False})
        try:
            _, high = self._consumer.get_watermark_offsets(
                TopicPartition(self.cfg.streaming.views_topic, 0), timeout=TIMEOUT_S, cached=False)
        except KafkaException:
            return None  # no pointer topic (yet): version 1, nothing moved
        if high == self._high:
            return None
        self._high = high
        return read_views(self.cfg)

    def close(self) -> None:
        """Release the consumer."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
