"""Kafka clients of the source and sink: property defaults and the driver's offset reader.

Consumers default to very large receive buffers because some brokers (the embedded noida-db
among them) answer a fetch with everything up to the high watermark, ignoring fetch.max.bytes;
any ``kafka.*`` option overrides these defaults.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import OffsetSpec as KafkaOffsetSpec

from jobs.errors import KafkaSourceError
from jobs.kafka.options import SourceOptions, unique_group_id
from jobs.kafka.specs import (
    EARLIEST,
    EARLIEST_OFFSET,
    LATEST,
    LATEST_OFFSET,
    OFFSETS,
    TIMESTAMP,
    OffsetSpec,
)

logger = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
T = TypeVar("T")
REQUEST_TIMEOUT_S = 30.0
RECEIVE_MAX_BYTES = 1_000_000_000
CONSUMER_DEFAULTS = {
    "receive.message.max.bytes": str(RECEIVE_MAX_BYTES),
    "fetch.max.bytes": str(100 * 1024 * 1024),
    "max.partition.fetch.bytes": str(10 * 1024 * 1024),
    "isolation.level": "read_uncommitted",
}
PRODUCER_DEFAULTS = {
    "enable.idempotence": "true",
    "acks": "all",
    "linger.ms": "5",
    "compression.type": "lz4",  # as the collector writes the source topics (docs/collector.md)
    "queue.buffering.max.messages": "1000000",
}
PYTHON_CLIENT_BOOLS = ("delivery.report.only.error",)
CLIENT_ONLY_PREFIXES = (
    "fetch.", "max.partition.fetch.bytes", "isolation.level", "group.", "session.timeout.ms",
    "heartbeat.", "auto.", "enable.auto.", "enable.partition.eof", "enable.idempotence",
    "enable.gapless.guarantee", "queued.", "partition.assignment.strategy", "max.poll.",
    "check.crcs", "consume.", "acks", "linger.ms", "batch.", "compression.", "queue.buffering.",
    "delivery.", "message.timeout.ms", "request.required.acks", "retries", "transactional.id",
    "sticky.partitioning", "partitioner",
)


LOG_INTERVAL_S = 30.0
"""A repeated librdkafka log line (same facility and text, e.g. one broker's ``Connect ... failed``)
is passed at most once per this many seconds per process, with the count of those held back."""
LIBRDKAFKA_LOG = logging.getLogger("jobs.kafka.librdkafka")
_VARYING = re.compile(r" \(after \d+ms in state \w+(, \d+ identical error\(s\) suppressed)?\)")


class RateLimit(logging.Filter):
    """Pass a log line once per ``interval_s`` per key (facility + text); count the rest.

    confluent-kafka logs each line as ``("%s [%s] %s", facility, client name, text)``: every
    client of the process shares the limit, so a broker that is down gives one line per
    ``interval_s`` however many clients retry it, instead of one per client per attempt.
    """

    def __init__(self, interval_s: float = LOG_INTERVAL_S, clock=time.monotonic) -> None:
        super().__init__()
        self.interval_s, self.clock = interval_s, clock
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        """True to emit the line (with the count held back since the last one), False to hold it."""
        args = record.args if isinstance(record.args, tuple) and len(record.args) == 3 else None
        key = (str(args[0]), _VARYING.sub("", str(args[2]))) if args else ("", record.getMessage())
        now = self.clock()
        with self._lock:
            last, held = self._seen.get(key, (None, 0))
            if last is not None and now - last < self.interval_s:
                self._seen[key] = (last, held + 1)
                return False
            self._seen[key] = (now, 0)
        if held:
            record.msg = f"{record.msg} ({held} more like it in the last {self.interval_s:.0f} s)"
        return True


LIBRDKAFKA_LOG.addFilter(RateLimit())


def consumer_config(kafka: Mapping[str, str], group_prefix: str) -> dict[str, Any]:
    """Properties of an executor consumer: assign-only, never commits; logs rate-limited."""
    props: dict[str, Any] = {**CONSUMER_DEFAULTS, **kafka}
    if "receive.message.max.bytes" not in kafka:
        needed = int(props["fetch.max.bytes"]) + 512
        props["receive.message.max.bytes"] = str(max(RECEIVE_MAX_BYTES, needed))
    props.setdefault("group.id", unique_group_id(f"{group_prefix}-executor"))
    props |= {"enable.auto.commit": "false", "enable.auto.offset.store": "false",
              "auto.offset.reset": "error", "enable.partition.eof": "false"}
    props.setdefault("logger", LIBRDKAFKA_LOG)
    return props


def producer_config(kafka: Mapping[str, str]) -> dict[str, Any]:
    """Properties of the sink's idempotent producer (kafka.* overrides defaults); logs rate-limited.

    Only failed deliveries are reported (``delivery.report.only.error``): the sink counts those.
    """
    props: dict[str, Any] = {**PRODUCER_DEFAULTS, "delivery.report.only.error": "true"}
    props |= kafka
    for key in PYTHON_CLIENT_BOOLS:
        props[key] = str(props[key]).lower() == "true"
    props.setdefault("logger", LIBRDKAFKA_LOG)
    return props


def admin_config(kafka: Mapping[str, str]) -> dict[str, Any]:
    """Connection and security properties only, for the driver's AdminClient; logs rate-limited."""
    props: dict[str, Any] = {key: value for key, value in kafka.items()
                             if not key.startswith(CLIENT_ONLY_PREFIXES)}
    props.setdefault("logger", LIBRDKAFKA_LOG)
    return props


class OffsetReader:
    """Driver-side queries: which partitions to read and their earliest/latest/timestamp offsets."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._admin: AdminClient | None = None
        committed = options.kafka.get("isolation.level", "") == "read_committed"
        self._isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED

    @property
    def admin(self) -> AdminClient:
        """The AdminClient, created on first use."""
        if self._admin is None:
            self._admin = AdminClient(admin_config(self._options.kafka))
        return self._admin

    def close(self) -> None:
        """Drop the client (librdkafka closes it when it is garbage-collected)."""
        self._admin = None

    def topic_partitions(self) -> list[TopicPartitionKey]:
        """Partitions the subscribe / subscribePattern / assign strategy reads now."""
        opts = self._options
        if opts.assign:
            return list(opts.assign)
        metadata = self._retry("list topics", lambda: self.admin.list_topics(timeout=REQUEST_TIMEOUT_S))
        if opts.subscribe:
            names = [t for t in opts.subscribe if t in metadata.topics]
        else:
            pattern = re.compile(opts.pattern or "")
            names = [t for t in metadata.topics if not t.startswith("__") and pattern.fullmatch(t)]
        return sorted((name, p) for name in names if metadata.topics[name].error is None
                      for p in metadata.topics[name].partitions)

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """The log start offset of each partition."""
        return self._list_offsets({tp: KafkaOffsetSpec.earliest() for tp in tps})

    def latest(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """The high watermark (last stable offset under read_committed) of each partition."""
        return self._list_offsets({tp: KafkaOffsetSpec.latest() for tp in tps})

    def resolve(self, spec: OffsetSpec, tps: list[TopicPartitionKey], *,
                starting: bool) -> dict[TopicPartitionKey, int]:
        """Turn an offsets spec into concrete offsets for ``tps``."""
        if spec.kind == EARLIEST:
            return self.earliest(tps)
        if spec.kind == LATEST:
            return self.latest(tps)
        if spec.kind == TIMESTAMP:
            wanted = dict.fromkeys(tps, spec.timestamp or 0)
        else:
            _check_same_partitions(spec, tps)
            wanted = dict(spec.values)
        if spec.kind == OFFSETS:
            specials = {tp: off for tp, off in wanted.items() if off in (EARLIEST_OFFSET, LATEST_OFFSET)}
            early = self.earliest(tp for tp, off in specials.items() if off == EARLIEST_OFFSET)
            late = self.latest(tp for tp, off in specials.items() if off == LATEST_OFFSET)
            return {**wanted, **early, **late}
        found = self._list_offsets({tp: KafkaOffsetSpec.for_timestamp(ts) for tp, ts in wanted.items()})
        missing = sorted(tp for tp, offset in found.items() if offset < 0)
        if missing and starting and spec.no_match == "error":
            topic, partition = missing[0]
            raise KafkaSourceError(
                f"option '{spec.option}': no record at or after timestamp {wanted[missing[0]]} in "
                f"{topic}-{partition}; choose an earlier timestamp, or set "
                "startingOffsetsByTimestampStrategy=latest to start there at the latest offset")
        return {**found, **self.latest(missing)} if missing else found

    def _list_offsets(
            self, specs: Mapping[TopicPartitionKey, KafkaOffsetSpec]) -> dict[TopicPartitionKey, int]:
        if not specs:
            return {}
        request = {TopicPartition(topic, partition): spec for (topic, partition), spec in specs.items()}

        def call() -> dict[TopicPartitionKey, int]:
            futures = self.admin.list_offsets(request, isolation_level=self._isolation,
                                              request_timeout=REQUEST_TIMEOUT_S)
            return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}

        return self._retry("list offsets", call)

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        opts = self._options
        for attempt in range(1, opts.fetch_retries + 1):
            try:
                return call()
            except KafkaException as exc:
                error = exc
                logger.warning("kafka %s failed attempt=%d of=%d error=%s", what, attempt,
                               opts.fetch_retries, exc)
                if attempt < opts.fetch_retries:
                    time.sleep(opts.fetch_retry_interval_ms / 1000)
                    self.close()
        raise KafkaSourceError(
            f"could not {what} for {opts.describe()} at {opts.kafka.get('bootstrap.servers')} after "
            f"{opts.fetch_retries} attempt(s): {error}; check that the brokers are reachable and the "
            "kafka.* security options (raise fetchOffset.numRetries for flaky networks)")


def _check_same_partitions(spec: OffsetSpec, tps: list[TopicPartitionKey]) -> None:
    given, assigned = set(spec.values), set(tps)
    if given != assigned:
        missing = ",".join(f"{t}-{p}" for t, p in sorted(assigned - given)) or "none"
        extra = ",".join(f"{t}-{p}" for t, p in sorted(given - assigned)) or "none"
        raise KafkaSourceError(
            f"option '{spec.option}' must list every topic-partition the query reads: missing "
            f"{missing}, unknown {extra}; use -2 for earliest and -1 for latest where you don't care")
