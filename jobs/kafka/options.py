"""Option names, parsing and validation of the ``kafka-py`` source and sink.

The option names are those of Spark's Kafka connector (KafkaSourceProvider.scala) where they
apply; every problem raises :class:`KafkaSourceError` naming the option, the bad value and what
to do. Options are case-insensitive, as in Spark. Offsets specs are parsed in
:mod:`jobs.kafka.specs`.
"""

from __future__ import annotations

import difflib
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jobs.errors import KafkaSourceError
from jobs.kafka.specs import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    parse_assign,
    parse_offset_spec,
    validate_spec_pair,
)

logger = logging.getLogger(__name__)

KAFKA_PREFIX = "kafka."
DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_CONSUMER_CACHE_CAPACITY = 16
DEFAULT_CONSUMER_CACHE_TIMEOUT_MS = 300_000
DEFAULT_FETCH_SPILL_MAX_BYTES = 1024 * 2**20
DEFAULT_FETCH_SPILL_TTL_MS = 120_000
STRATEGIES = ("subscribe", "subscribepattern", "assign")
SOURCE_OPTIONS = {
    "subscribe", "subscribepattern", "assign", "startingoffsets", "startingtimestamp",
    "startingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "endingoffsets",
    "endingtimestamp", "endingoffsetsbytimestamp", "failondataloss", "includeheaders",
    "maxoffsetspertrigger", "minpartitions", "maxrecordsperpartition", "groupidprefix",
    "kafkaconsumer.polltimeoutms", "fetchoffset.numretries", "fetchoffset.retryintervalms",
    "commitoffsetstogroup", "datalosslogdir", "initialoffsetsfile", "consumercache.capacity",
    "consumercache.timeoutms", "fetchspill.maxbytes", "fetchspill.ttlms", "fetchspill.dir",
    "emitranges",
    "rangegroups", "rangecuts", "prefetchranges",
}
UNSUPPORTED_SOURCE_OPTIONS = {
    "minoffsetspertrigger": "Spark 4.2 Python sources cannot combine a minimum with "
                            "maxOffsetsPerTrigger; use a processing-time trigger interval instead",
    "maxtriggerdelay": "it only applies to minOffsetsPerTrigger, which kafka-py does not support",
}
SINK_OPTIONS = {"topic", "flushtimeoutms"}
SPARK_OPTIONS = {"checkpointlocation"}
REJECTED_KAFKA = {
    "auto.offset.reset": "set the source option 'startingOffsets' to 'earliest' or 'latest' "
                         "instead; the query tracks its offsets in the checkpoint",
    "enable.auto.commit": "offsets live in the checkpoint; use 'commitOffsetsToGroup' to make "
                          "the query visible to lag tools",
    "key.deserializer": "keys are always binary; deserialize them with DataFrame operations",
    "value.deserializer": "values are always binary; deserialize them with DataFrame operations",
    "interceptor.classes": "interceptors can modify payloads, which is not safe",
}
REJECTED_KAFKA_SINK = {
    "key.serializer": "keys are written as bytes; cast the key column to string or binary",
    "value.serializer": "values are written as bytes; cast the value column to string or binary",
}


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of one Kafka read (batch or streaming)."""

    kafka: dict[str, str]
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()
    starting: OffsetSpec = field(default_factory=lambda: OffsetSpec(LATEST))
    ending: OffsetSpec | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    group_id_prefix: str = "spark-kafka-source"
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_retries: int = 3
    fetch_retry_interval_ms: int = 1000
    commit_group: str | None = None
    data_loss_dir: str | None = None
    initial_offsets_file: str | None = None
    consumer_cache_capacity: int = DEFAULT_CONSUMER_CACHE_CAPACITY
    consumer_cache_timeout_ms: int = DEFAULT_CONSUMER_CACHE_TIMEOUT_MS
    fetch_spill_max_bytes: int = DEFAULT_FETCH_SPILL_MAX_BYTES
    fetch_spill_ttl_ms: int = DEFAULT_FETCH_SPILL_TTL_MS
    fetch_spill_dir: str | None = None
    emit_ranges: bool = False
    range_groups: int | None = None
    """With ``emitRanges``: this many input partitions, each a list of ranges holding an equal share
    of the batch's records (ranges cut where needed), instead of one input partition per range."""
    range_cuts: bool = True
    """With ``rangeGroups``: false keeps every range whole (groups balanced by whole ranges), for
    readers that must see each topic-partition's records of a batch in one task."""
    prefetch_ranges: bool = False
    """A reader of several ranges starts the next partition's fetch before reading the current one."""

    def describe(self) -> str:
        """What the source reads, for log lines and error messages."""
        if self.subscribe:
            return f"subscribe={','.join(self.subscribe)}"
        if self.pattern:
            return f"subscribePattern={self.pattern}"
        return "assign=" + ",".join(f"{t}-{p}" for t, p in self.assign)


@dataclass(frozen=True)
class SinkOptions:
    """Validated options of one Kafka write."""

    kafka: dict[str, str]
    topic: str | None = None
    flush_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate the options of a read like KafkaSourceProvider does; raise KafkaSourceError."""
    opts = {key.lower(): str(value) for key, value in options.items()}
    _reject_unknown(opts, SOURCE_OPTIONS, "source")
    kafka = _kafka_params(opts, REJECTED_KAFKA)
    strategy = _strategy(opts)
    starting = parse_offset_spec(opts, "starting", default=LATEST if streaming else EARLIEST)
    ending = parse_offset_spec(opts, "ending", default=None if streaming else LATEST)
    assert starting is not None, "a starting spec always has a default"
    validate_spec_pair(starting, ending, streaming=streaming)
    _warn_batch_only(opts, streaming)
    if "group.id" in kafka:
        logger.warning("option kafka.group.id is set: executors use it as their group id; the "
                       "source never joins or commits with it (use commitOffsetsToGroup)")
    return SourceOptions(
        kafka=kafka,
        **strategy,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
        include_headers=_bool(opts, "includeheaders", "includeHeaders", False),
        max_offsets_per_trigger=_positive(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
        min_partitions=_positive(opts, "minpartitions", "minPartitions"),
        max_records_per_partition=_positive(opts, "maxrecordsperpartition",
                                            "maxRecordsPerPartition"),
        group_id_prefix=opts.get("groupidprefix",
                                 "spark-kafka-source" if streaming else "spark-kafka-relation"),
        poll_timeout_ms=_positive(opts, "kafkaconsumer.polltimeoutms",
                                  "kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS,
        fetch_retries=_positive(opts, "fetchoffset.numretries", "fetchOffset.numRetries") or 3,
        fetch_retry_interval_ms=_positive(opts, "fetchoffset.retryintervalms",
                                          "fetchOffset.retryIntervalMs") or 1000,
        commit_group=_non_empty(opts, "commitoffsetstogroup", "commitOffsetsToGroup"),
        data_loss_dir=_non_empty(opts, "datalosslogdir", "dataLossLogDir"),
        initial_offsets_file=_non_empty(opts, "initialoffsetsfile", "initialOffsetsFile"),
        consumer_cache_capacity=_count(opts, "consumercache.capacity", "consumerCache.capacity",
                                       DEFAULT_CONSUMER_CACHE_CAPACITY),
        consumer_cache_timeout_ms=_positive(opts, "consumercache.timeoutms",
                                            "consumerCache.timeoutMs")
        or DEFAULT_CONSUMER_CACHE_TIMEOUT_MS,
        fetch_spill_max_bytes=_count(opts, "fetchspill.maxbytes", "fetchSpill.maxBytes",
                                     DEFAULT_FETCH_SPILL_MAX_BYTES),
        fetch_spill_ttl_ms=_positive(opts, "fetchspill.ttlms", "fetchSpill.ttlMs")
        or DEFAULT_FETCH_SPILL_TTL_MS,
        fetch_spill_dir=_non_empty(opts, "fetchspill.dir", "fetchSpill.dir"),
        emit_ranges=_bool(opts, "emitranges", "emitRanges", False),
        range_groups=_positive(opts, "rangegroups", "rangeGroups"),
        range_cuts=_bool(opts, "rangecuts", "rangeCuts", True),
        prefetch_ranges=_bool(opts, "prefetchranges", "prefetchRanges", False),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate the options of a write; raise KafkaSourceError."""
    opts = {key.lower(): str(value) for key, value in options.items()}
    _reject_unknown(opts, SINK_OPTIONS, "sink")
    kafka = _kafka_params(opts, REJECTED_KAFKA_SINK)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise KafkaSourceError("option 'topic' is empty; give a topic name or drop the option "
                               "and provide a 'topic' column")
    timeout = _positive(opts, "flushtimeoutms", "flushTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS
    return SinkOptions(kafka=kafka, topic=topic.strip() if topic else None,
                       flush_timeout_ms=timeout)


def unique_group_id(prefix: str) -> str:
    """A group id no other consumer uses (the executors never join or commit with it)."""
    return f"{prefix}-{uuid.uuid4().hex}"


def _reject_unknown(opts: Mapping[str, str], known: set[str], kind: str) -> None:
    for key in opts:
        if key.startswith(KAFKA_PREFIX) or key in known or key in SPARK_OPTIONS:
            continue
        if key in UNSUPPORTED_SOURCE_OPTIONS:
            raise KafkaSourceError(f"option '{key}' is not supported by the kafka-py {kind}: "
                                   f"{UNSUPPORTED_SOURCE_OPTIONS[key]}")
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise KafkaSourceError(f"unknown option '{key}' for the kafka-py {kind}: {hint}Kafka client "
                               "properties take the 'kafka.' prefix (see docs/kafka-source.md)")


def _kafka_params(opts: Mapping[str, str], rejected: Mapping[str, str]) -> dict[str, str]:
    kafka = {key[len(KAFKA_PREFIX):]: value for key, value in opts.items()
             if key.startswith(KAFKA_PREFIX)}
    for name, reason in rejected.items():
        if name in kafka:
            raise KafkaSourceError(f"Kafka option 'kafka.{name}' is not supported: {reason}")
    if not kafka.get("bootstrap.servers", "").strip():
        raise KafkaSourceError("option 'kafka.bootstrap.servers' must be specified (host:port"
                               "[,host:port]); read_kafka/write_kafka take it from the config")
    return kafka


def _strategy(opts: Mapping[str, str]) -> dict[str, Any]:
    given = [key for key in STRATEGIES if key in opts]
    if len(given) != 1:
        found = f"found {', '.join(given)}" if given else "found none"
        raise KafkaSourceError("exactly one of the options 'subscribe', 'subscribePattern', "
                               f"'assign' must be specified for the Kafka source ({found})")
    key, value = given[0], opts[given[0]]
    if key == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise KafkaSourceError(f"option 'subscribe' is {value!r}: no topics to subscribe to; "
                                   "give a comma-separated list of topic names")
        return {"subscribe": topics}
    if key == "subscribepattern":
        try:
            re.compile(value.strip())
        except re.error as exc:
            raise KafkaSourceError(f"option 'subscribePattern' is {value!r}: not a valid regular "
                                   f"expression ({exc}); fix the pattern") from None
        if not value.strip():
            raise KafkaSourceError("option 'subscribePattern' is empty; give a regular expression "
                                   "matching whole topic names")
        return {"pattern": value.strip()}
    return {"assign": parse_assign(value)}


def _warn_batch_only(opts: Mapping[str, str], streaming: bool) -> None:
    if not streaming and "maxoffsetspertrigger" in opts:
        logger.warning("maxOffsetsPerTrigger option ignored in batch queries")


def _bool(opts: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    text = opts.get(key)
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise KafkaSourceError(f"option '{name}' is {text!r}: expected 'true' or 'false'")
    return text.strip().lower() == "true"


def _positive(opts: Mapping[str, str], key: str, name: str) -> int | None:
    text = opts.get(key)
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise KafkaSourceError(f"option '{name}' is {text!r}: expected a positive integer")
    return value


def _count(opts: Mapping[str, str], key: str, name: str, default: int) -> int:
    """A non-negative integer option (0 allowed: e.g. no pooling)."""
    text = opts.get(key)
    if text is None:
        return default
    if not text.strip().isdigit():
        raise KafkaSourceError(f"option '{name}' is {text!r}: expected a non-negative integer")
    return int(text.strip())


def _non_empty(opts: Mapping[str, str], key: str, name: str) -> str | None:
    text = opts.get(key)
    if text is not None and not text.strip():
        raise KafkaSourceError(f"option '{name}' is empty; give a value or drop the option")
    return text.strip() if text else None
