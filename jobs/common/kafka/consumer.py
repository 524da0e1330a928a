"""Executor side of the source: read one offset range of one topic-partition as Arrow batches.

Consumers come from the worker's pool (:mod:`jobs.common.kafka.pool`) and go back to it after a
clean read, so the next micro-batch of the partition continues from what the consumer has already
fetched instead of fetching the rest of the partition again. A consumer is assigned (never
subscribed) and positioned at the range's first offset as the lease says (reuse, skip ahead,
seek, assign); it stops at the range's end and keeps records fetched past it for the next range.
Offsets missing inside the range are normal on compacted or transactional topics (commit
markers take offsets); they are data loss only when the start is below the log start offset.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterator, Sequence

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from jobs.common.errors import KafkaSourceError
from jobs.common.kafka import dataloss
from jobs.common.kafka.arrow import arrow_schema, to_record_batch
from jobs.common.kafka.client import REQUEST_TIMEOUT_S, consumer_config
from jobs.common.kafka.dataloss import DataLoss
from jobs.common.kafka.offsets import OffsetRange
from jobs.common.kafka.options import SourceOptions
from jobs.common.kafka.pool import ConsumerPool, Lease, pool_key
from jobs.common.kafka.spill import FetchSpill, fetch_spill, spill_key, spill_surplus

logger = logging.getLogger(__name__)

MAX_BATCH_ROWS = 20_000
POLL_S = 0.2
WATERMARK_CHECK_S = 1.0
REAPER_INTERVAL_S = 30.0
OUT_OF_RANGE = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}
PERMANENT_LOCAL = {KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError._SSL,
                   KafkaError._AUTHENTICATION, KafkaError._INVALID_ARG}

_POOL: ConsumerPool[Consumer] = ConsumerPool(lambda consumer: consumer.close(),
                                             reaper_interval_s=REAPER_INTERVAL_S)


def consumer_pool() -> ConsumerPool[Consumer]:
    """This worker process's consumer pool (``stats()`` shows how often consumers were reused)."""
    return _POOL


def read_range(rng: OffsetRange, options: SourceOptions, *, spill: bool = False
               ) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow record batches of the source schema.

    With ``spill`` (streaming reads), the range is first served from the executor's fetch spill
    (:mod:`jobs.common.kafka.spill`), and what the consumer fetched past the range's end is
    spilled for the next read of the partition, whichever Python worker runs it.
    """
    return read_ranges([rng], options, spill=spill)


def read_ranges(ranges: Sequence[OffsetRange], options: SourceOptions, *, spill: bool = False,
                continued: Collection[int] = ()) -> Iterator[pa.RecordBatch]:
    """:func:`read_range` of each range in turn, the next range's fetch started before this one's read.

    A task that reads several ranges (``rangeGroups``) would otherwise ask Kafka for a partition
    only once it is done with the one before: a broker that takes a while to answer (the
    embedded one answers with the whole rest of the partition) then leaves the task idle. With
    ``prefetchRanges``, before a range is read, the consumer of the next range (of another
    partition) is leased and positioned, so librdkafka fetches it in the background meanwhile, at
    the cost of one more fetch in memory. Consecutive ranges of one partition are not opened
    early: the first one's consumer goes on to the second.

    ``continued``: indexes of ranges another reader reads on from (``RangeGroup.continued``):
    what was fetched past their end is not spilled, that reader fetches it itself.
    """
    opened: _Opened | None = None
    try:
        for index, rng in enumerate(ranges):
            current = opened if opened is not None else _open(rng, options, spill, index in continued)
            opened = None
            following = ranges[index + 1] if index + 1 < len(ranges) else None
            if (options.prefetch_ranges and following is not None
                    and (following.topic, following.partition) != (rng.topic, rng.partition)):
                try:
                    opened = _open(following, options, spill, index + 1 in continued)
                except BaseException:
                    current.abandon()
                    raise
            yield from current.read()
    finally:
        if opened is not None:
            opened.abandon()


class _Opened:
    """A range ready to read: what the spill holds of it, then a positioned consumer for the rest."""

    def __init__(self, rng: OffsetRange, options: SourceOptions, served: list[pa.RecordBatch], *,
                 spilled: FetchSpill | None, skey: str, lease: Lease[Consumer] | None,
                 spill_surplus: bool = True) -> None:
        self.rng, self.options, self.served = rng, options, served
        self.spill_surplus = spill_surplus
        self.spilled, self.skey, self.lease = spilled, skey, lease
        self.reader = _RangeReader(lease, rng, options) if lease is not None else None
        self.pending = self.reader.position() if self.reader is not None else []

    def read(self) -> Iterator[pa.RecordBatch]:
        """The range's records: the spilled ones, then the consumer's; the lease goes back."""
        if self.reader is None or self.lease is None:
            yield from self.served
            return
        lease, reader, rng, spilled = self.lease, self.reader, self.rng, self.spilled
        schema = arrow_schema(self.options.include_headers)
        reusable = False
        try:
            yield from self.served
            yield from reader.batches(schema, self.pending)
            reusable = reader.clean
        finally:
            lease.position, lease.pending = (rng.end, reader.leftover) if reusable else (None, [])
            if reusable and spilled is not None and self.spill_surplus:
                try:
                    spill_surplus(lease, rng, spilled, self.skey, schema=schema, chunk_rows=MAX_BATCH_ROWS)
                except Exception as exc:  # a full disk must not fail a read that is complete
                    logger.warning("kafka spill failed, consumer dropped topic=%s partition=%d error=%s",
                                   rng.topic, rng.partition, exc)
                    reusable = False
            if reusable:
                reusable = _pause(lease.consumer, rng)
            _POOL.release(lease, reusable=reusable)

    def abandon(self) -> None:
        """Give the lease back unread (the task failed or stopped first): the consumer is closed."""
        if self.lease is not None:
            _POOL.release(self.lease, reusable=False)
            self.lease = None


def _open(rng: OffsetRange, options: SourceOptions, spill: bool, continued: bool = False) -> _Opened:
    """Serve ``rng`` from the spill as far as it goes; lease and position a consumer for the rest."""
    _POOL.configure(capacity=options.consumer_cache_capacity,
                    idle_timeout_s=options.consumer_cache_timeout_ms / 1000)
    key = pool_key(options.kafka, options.group_id_prefix, rng.topic, rng.partition)
    spilled = fetch_spill(options) if spill else None
    skey = spill_key(key[0], rng.topic, rng.partition, options.include_headers)
    served: list[pa.RecordBatch] = []
    if spilled is not None:
        served, reached = spilled.read(skey, rng.start, rng.end, MAX_BATCH_ROWS)
        if reached >= rng.end:
            return _Opened(rng, options, served, spilled=spilled, skey=skey, lease=None)
        rng = OffsetRange(rng.topic, rng.partition, reached, rng.end)
    lease = _POOL.acquire(key, lambda: Consumer(consumer_config(options.kafka, options.group_id_prefix)),
                          rng.start, retry=_task_retry())
    try:
        return _Opened(rng, options, served, spilled=spilled, skey=skey, lease=lease,
                       spill_surplus=not continued)
    except BaseException:
        _POOL.release(lease, reusable=False)
        raise


def _pause(consumer: Consumer, rng: OffsetRange) -> bool:
    """Stop an idle pooled consumer's fetching (False: it cannot be paused, do not pool it).

    An assigned consumer keeps prefetching while it waits in the pool; against a broker that
    answers fetches at once (the embedded one ignores fetch.wait.max.ms) every idle consumer
    cost about half a core. Paused, it fetches nothing; on resume librdkafka continues from the
    last record handed out, so the lease's position and pending records stay exact.
    """
    try:
        consumer.pause([TopicPartition(rng.topic, rng.partition)])
    except KafkaException as exc:
        logger.debug("kafka pause failed topic=%s partition=%d error=%s", rng.topic, rng.partition, exc)
        return False
    return True


def _task_retry() -> bool:
    """True in a retried task: its consumers may be what failed (the JVM drops them too)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return context is not None and context.attemptNumber() >= 1


class _RangeReader:
    def __init__(self, lease: Lease[Consumer], rng: OffsetRange, options: SourceOptions) -> None:
        self.lease = lease
        self.consumer = lease.consumer
        self.rng = rng
        self.options = options
        self.next = rng.start
        self.rows = 0
        self.dropped = 0
        self.clean = True
        self.leftover: list[Message] = []

    def batches(self, schema: pa.Schema, pending: list[Message]) -> Iterator[pa.RecordBatch]:
        """The range's records from the positioned consumer, ``pending`` (see :meth:`position`) first."""
        rng, began = self.rng, time.monotonic()
        idle_since = time.monotonic()
        while self.next < rng.end:
            wanted = min(MAX_BATCH_ROWS, rng.end - self.next)
            messages = pending or self.consumer.consume(wanted, timeout=POLL_S)
            pending = []
            progressed = any(message.error() is None for message in messages)
            data = self._data(messages)
            if progressed:
                idle_since = time.monotonic()
            if data:
                self.rows += len(data)
                yield to_record_batch(data, rng.topic, rng.partition, schema)
            elif not progressed and self._idle(idle_since):
                break
        logger.debug("kafka range read topic=%s partition=%d start=%d end=%d rows=%d placement=%s "
                     "dropped=%d elapsed_s=%.3f", rng.topic, rng.partition, rng.start, rng.end,
                     self.rows, self.lease.placement, self.dropped, time.monotonic() - began)

    def position(self) -> list[Message]:
        """Put the leased consumer at the range start; return pending records to serve first.

        A pooled consumer was paused when it was released, and librdkafka dropped what it had
        prefetched; after ``resume`` it would wait 0.4-0.6 s before fetching again (measured
        against the embedded broker, whatever ``fetch.*backoff.ms`` says), while a seek fetches
        at once. So every pooled consumer is resumed and seeked: to just after its pending
        records (``reuse``) or to the range start (``skip``, ``seek``).
        """
        kind, tp = self.lease.placement, TopicPartition(self.rng.topic, self.rng.partition)
        if kind == "assign":
            self._assign()
            return []
        pending = self.lease.pending if kind == "reuse" else []
        target = _offset(pending[-1]) + 1 if pending else self.next
        try:
            self.consumer.resume([tp])
            self.consumer.seek(TopicPartition(tp.topic, tp.partition, target))
        except KafkaException as exc:
            logger.debug("kafka resume/seek failed, assigning topic=%s partition=%d error=%s",
                         tp.topic, tp.partition, exc)
            self._assign()
            return []
        return pending

    def _assign(self) -> None:
        self.consumer.assign([TopicPartition(self.rng.topic, self.rng.partition, self.next)])

    def _data(self, messages: list[Message]) -> list[Message]:
        """Records of the range in ``messages``; below ``next``: dropped, at or past the end: kept."""
        data = []
        for message in messages:
            error = message.error()
            if error is None:
                data.append(message)
            elif error.code() in OUT_OF_RANGE:
                self._out_of_range()
                return []
            elif _permanent(error):
                raise KafkaSourceError(
                    f"reading {self.rng.topic}-{self.rng.partition} offsets [{self.rng.start}, "
                    f"{self.rng.end}) failed at offset {self.next}: {error.str()}; check topic ACLs "
                    "and the kafka.* security options")
        if data and _offset(data[0]) < self.next:
            kept = [m for m in data if _offset(m) >= self.next]
            self.dropped += len(data) - len(kept)
            data = kept
        if not data:
            return []
        if _offset(data[0]) > self.next:
            self._check_gap()
        end = self.rng.end
        if _offset(data[-1]) >= end:
            self.leftover = [m for m in data if _offset(m) >= end]
            data = [m for m in data if _offset(m) < end]
            self.next = end
        else:
            self.next = _offset(data[-1]) + 1
        return data

    def _idle(self, idle_since: float) -> bool:
        """After an empty poll: True when the range is done, raise when it cannot be finished."""
        tp = TopicPartition(self.rng.topic, self.rng.partition)
        position = self.consumer.position([tp])[0].offset
        if position >= self.rng.end:
            self.next = self.rng.end
            return True
        idle = time.monotonic() - idle_since
        if idle >= WATERMARK_CHECK_S:
            low, high = self._watermarks()
            if low > self.next:
                self._out_of_range()
            elif high <= self.next:
                self._lost(DataLoss("offset_reset", self.rng.topic, self.rng.partition,
                                    requested=self.next, earliest=high))
                return True
        if idle * 1000 >= self.options.poll_timeout_ms:
            raise KafkaSourceError(
                f"no record of {self.rng.topic}-{self.rng.partition} arrived for {idle:.0f} s at "
                f"offset {self.next} (range [{self.rng.start}, {self.rng.end})); check the broker, or "
                "raise kafkaConsumer.pollTimeoutMs")
        return False

    def _watermarks(self) -> tuple[int, int]:
        tp = TopicPartition(self.rng.topic, self.rng.partition)
        return self.consumer.get_watermark_offsets(tp, timeout=REQUEST_TIMEOUT_S, cached=False)

    def _out_of_range(self) -> None:
        self.clean = False
        low, high = self._watermarks()
        if low > self.next:
            self._lost(DataLoss("deleted", self.rng.topic, self.rng.partition, requested=self.next,
                                earliest=low, skipped=min(low, self.rng.end) - self.next))
            self.next = min(low, self.rng.end)
        elif high <= self.next:
            self._lost(DataLoss("offset_reset", self.rng.topic, self.rng.partition,
                                requested=self.next, earliest=high))
            self.next = self.rng.end
        if self.next < self.rng.end:
            self._assign()

    def _check_gap(self) -> None:
        low, _ = self._watermarks()
        if low > self.next:
            self._lost(DataLoss("deleted", self.rng.topic, self.rng.partition, requested=self.next,
                                earliest=low, skipped=min(low, self.rng.end) - self.next))

    def _lost(self, loss: DataLoss) -> None:
        self.clean = False
        dataloss.report([loss], fail=self.options.fail_on_data_loss,
                        ledger_dir=self.options.data_loss_dir)


def _permanent(error: KafkaError) -> bool:
    """Errors that polling longer will not fix (local transport errors are retried)."""
    if error.fatal() or error.code() in PERMANENT_LOCAL:
        return True
    return error.code() > 0 and not error.retriable()


def _offset(message: Message) -> int:
    """The offset of a fetched record (never None for records, only for errors)."""
    offset = message.offset()
    assert offset is not None, "a fetched record always has an offset"
    return offset
