"""The ``kafka-py`` sink: Arrow batches in, Kafka records out, nothing dropped silently.

Columns follow Spark's Kafka sink (KafkaWriter.scala): ``value`` (required, string or binary),
``key`` (string or binary), ``topic`` (string; the ``topic`` option overrides it), ``headers``
(array<struct<key:string,value:binary>>) and ``partition`` (int); other columns are ignored.
Each task flushes its idempotent producer before it returns, and any delivery error fails the
task, so Spark never commits a batch with undelivered records. Kafka has no rollback: a failed or
replayed batch may have written some records already (at-least-once, as with the JVM sink).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import repeat

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark.sql import types as T
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from jobs.errors import KafkaSourceError
from jobs.kafka.arrow import HEADERS_TYPE
from jobs.kafka.client import producer_config
from jobs.kafka.options import SinkOptions

logger = logging.getLogger(__name__)

BYTES_OR_STRING = (T.StringType(), T.BinaryType())
_NO_EXTRA: dict = {}


@dataclass(frozen=True)
class SinkLayout:
    """Which sink columns the written DataFrame has."""

    topic: bool
    key: bool
    headers: bool
    partition: bool


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one write task delivered."""

    rows: int


def sink_layout(schema: T.StructType, options: SinkOptions) -> SinkLayout:
    """Validate the written columns like KafkaWriter.validateQuery; raise KafkaSourceError."""
    types = {f.name: f.dataType for f in schema.fields}
    columns = ", ".join(f"{name} {dtype.simpleString()}" for name, dtype in types.items())
    if "value" not in types:
        raise KafkaSourceError(f"required column 'value' not found in ({columns}); select or alias "
                               "the payload as 'value' (string or binary)")
    _check_type(types, "value", BYTES_OR_STRING, "string or binary")
    _check_type(types, "key", BYTES_OR_STRING, "string or binary")
    _check_type(types, "topic", (T.StringType(),), "string")
    _check_type(types, "headers", (HEADERS_TYPE,), "array<struct<key:string,value:binary>>")
    _check_type(types, "partition", (T.IntegerType(),), "int")
    if options.topic is None and "topic" not in types:
        raise KafkaSourceError(f"no 'topic' column in ({columns}) and no 'topic' option; set the "
                               "topic option (or write_kafka(topic=...)) or add a topic column")
    return SinkLayout(topic=options.topic is None, key="key" in types, headers="headers" in types,
                      partition="partition" in types)


class _ProducingWriter:
    """What the batch and the streaming writer share: each task produces its rows and flushes."""

    def __init__(self, options: SinkOptions, layout: SinkLayout) -> None:
        self._options = options
        self._layout = layout

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        """Produce every row of this task and wait until Kafka acknowledged all of them."""
        return SinkCommit(produce_batches(iterator, self._options, self._layout))


class KafkaBatchWriter(_ProducingWriter, DataSourceArrowWriter):
    """``df.write.format("kafka-py")``: each task produces its rows and flushes."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task delivered its rows."""
        rows = sum(m.rows for m in messages if isinstance(m, SinkCommit))
        logger.info("kafka write committed rows=%d tasks=%d", rows, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """A task failed; rows of other tasks may already be in Kafka (no rollback)."""
        logger.warning("kafka write aborted tasks=%d; records of finished tasks stay in Kafka",
                       len(messages))


class KafkaStreamWriter(_ProducingWriter, DataSourceStreamArrowWriter):
    """``writeStream.format("kafka-py")``: a micro-batch commits only when fully delivered."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task of micro-batch ``batchId`` delivered its rows."""
        rows = sum(m.rows for m in messages if isinstance(m, SinkCommit))
        logger.debug("kafka stream write committed batch_id=%d rows=%d", batchId, rows)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Micro-batch ``batchId`` failed; it will be replayed (at-least-once)."""
        logger.warning("kafka stream write aborted batch_id=%d tasks=%d", batchId, len(messages))


_SHARED: dict[tuple[tuple[str, str], ...], tuple[Producer, list[KafkaError]]] = {}


def _new_producer(kafka: Mapping[str, str]) -> tuple[Producer, list[KafkaError]]:
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    return Producer(producer_config(kafka) | {"on_delivery": on_delivery}), failures


class TaskProducer:
    """The idempotent producer of one task: counts failed deliveries; :meth:`finish` flushes.

    Nothing is dropped silently: ``finish`` raises KafkaSourceError unless Kafka acknowledged
    every record, so the task (and with it the batch) fails and is retried. The librdkafka
    producer behind it is kept per worker process and configuration and reused by the next task
    (creating one costs a connection and an idempotent-producer handshake, hundreds of ms per
    micro-batch); a task runs alone in its worker, and a producer whose task failed is dropped.
    """

    def __init__(self, kafka: Mapping[str, str], flush_timeout_ms: int) -> None:
        self._key = tuple(sorted((str(k), str(v)) for k, v in kafka.items()))
        entry = _SHARED.get(self._key)
        if entry is None:
            entry = _SHARED[self._key] = _new_producer(kafka)
        self._producer, self.failures = entry
        self.failures.clear()
        self.rows = 0
        self._flush_timeout_s = flush_timeout_ms / 1000

    def discard(self) -> None:
        """Do not reuse this producer (its task failed); queued records may still be delivered."""
        _SHARED.pop(self._key, None)

    def produce(self, topic: str | None, value: object, key: object = None,
                headers: list[tuple[str, bytes]] | None = None, partition: int | None = None) -> None:
        """Queue one record (waiting for room when librdkafka's queue is full)."""
        extra: dict = _NO_EXTRA
        if partition is not None or headers:
            extra = {"partition": partition} if partition is not None else {}
            if headers:
                extra["headers"] = headers
        while True:
            try:
                self._producer.produce(topic, value, key, **extra)  # type: ignore[arg-type]
                break
            except BufferError:
                self._producer.poll(0.1)
            except KafkaException as exc:
                raise KafkaSourceError(f"a record was rejected by the producer: {exc.args[0].str()}; "
                                       "the batch fails") from None
        self.rows += 1

    def poll(self) -> None:
        """Serve delivery callbacks without waiting."""
        self._producer.poll(0)

    def finish(self) -> int:
        """Flush; the number of records produced, or KafkaSourceError if any was not delivered."""
        remaining = self._producer.flush(self._flush_timeout_s)
        rows = self.rows
        if remaining:
            self.discard()
            raise KafkaSourceError(f"{remaining} of {rows} record(s) were not acknowledged within "
                                   f"flushTimeoutMs={int(self._flush_timeout_s * 1000)}; the batch "
                                   "fails and will be retried; check the brokers")
        if self.failures:
            self.discard()
            first = self.failures[0]
            raise KafkaSourceError(f"{len(self.failures)} of {rows} record(s) failed delivery to Kafka, "
                                   f"first error: {first.str()} ({first.name()}); the batch fails "
                                   "so nothing is dropped silently: fix the cause (topic exists? record "
                                   "within max.message.bytes? ACLs?) and rerun")
        return rows


def produce_batches(batches: Iterator[pa.RecordBatch], options: SinkOptions, layout: SinkLayout) -> int:
    """Produce all rows, flush, and raise KafkaSourceError unless every record was delivered."""
    producer = TaskProducer(options.kafka, options.flush_timeout_ms)
    began = time.monotonic()
    try:
        for batch in batches:
            _produce_batch(producer, batch, options, layout)
    except BaseException:
        producer.discard()
        raise
    rows = producer.finish()
    logger.debug("kafka produce rows=%d elapsed_s=%.3f", rows, time.monotonic() - began)
    return rows


def _produce_batch(producer: TaskProducer, batch: pa.RecordBatch, options: SinkOptions,
                   layout: SinkLayout) -> int:
    count = batch.num_rows
    values = batch.column("value").to_pylist()
    keys = batch.column("key").to_pylist() if layout.key else repeat(None, count)
    if layout.topic:
        topics: Iterable[str | None] = batch.column("topic").to_pylist()
        if batch.column("topic").null_count:
            raise KafkaSourceError("a row has a null 'topic'; fill the topic column or set the "
                                   "topic option as the default")
    else:
        topics = repeat(options.topic, count)
    extras = _extras(batch, layout)
    if extras is None:
        for topic, value, key in zip(topics, values, keys, strict=False):
            producer.produce(topic, value, key)
    else:
        for topic, value, key, extra in zip(topics, values, keys, extras, strict=False):
            producer.produce(topic, value, key, **extra)
    producer.poll()
    return count


def _extras(batch: pa.RecordBatch, layout: SinkLayout) -> list[dict] | None:
    """Per-row ``partition`` / ``headers`` keyword arguments, or None when neither column is there."""
    if not (layout.partition or layout.headers):
        return None
    count = batch.num_rows
    partitions = batch.column("partition").to_pylist() if layout.partition else [None] * count
    headers = batch.column("headers").to_pylist() if layout.headers else [None] * count
    extras = []
    for partition, row_headers in zip(partitions, headers, strict=True):
        extra: dict = {} if partition is None else {"partition": partition}
        if row_headers:
            extra["headers"] = [(h["key"], h["value"]) for h in row_headers]
        extras.append(extra)
    return extras


def _check_type(types: dict[str, T.DataType], name: str, allowed: tuple[T.DataType, ...],
                wanted: str) -> None:
    if name in types and types[name].simpleString() not in {t.simpleString() for t in allowed}:
        raise KafkaSourceError(f"column '{name}' is {types[name].simpleString()}, expected {wanted}; "
                               f"cast it, e.g. F.col('{name}').cast('{wanted.split(maxsplit=1)[0]}')")
