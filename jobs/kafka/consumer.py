"""Executor side of the source: read offset ranges of topic-partitions as Arrow batches.

Consumers come from the worker's pool (:mod:`jobs.kafka.pool`) and go back to it after a
clean read, so the next micro-batch of the partition continues from what the consumer has already
fetched instead of fetching the rest of the partition again. A consumer is assigned (never
subscribed) and positioned at the range's first offset as the lease says (reuse, skip ahead,
seek, assign); the range itself is read by :class:`jobs.kafka.range_reader.RangeReader`,
which stops at its end and keeps records fetched past it for the next range.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Sequence

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, TopicPartition

from jobs.host.memory import release_memory
from jobs.kafka.arrow import arrow_schema
from jobs.kafka.client import consumer_config
from jobs.kafka.offsets import OffsetRange
from jobs.kafka.options import SourceOptions
from jobs.kafka.pool import ConsumerPool, Lease, pool_key
from jobs.kafka.range_reader import MAX_BATCH_ROWS, RangeReader
from jobs.kafka.spill import CHUNK_ROWS, FetchSpill, fetch_spill, spill_key, spill_surplus

logger = logging.getLogger(__name__)

REAPER_INTERVAL_S = 30.0

_POOL: ConsumerPool[Consumer] = ConsumerPool(lambda consumer: consumer.close(),
                                             reaper_interval_s=REAPER_INTERVAL_S)


def consumer_pool() -> ConsumerPool[Consumer]:
    """This worker process's consumer pool (``stats()`` shows how often consumers were reused)."""
    return _POOL


def read_range(rng: OffsetRange, options: SourceOptions, *, spill: bool = False
               ) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow record batches of the source schema.

    With ``spill`` (streaming reads), the range is first served from the executor's fetch spill
    (:mod:`jobs.kafka.spill`), and what the consumer fetched past the range's end is
    spilled for the next read of the partition, whichever Python worker runs it.
    """
    return read_ranges([rng], options, spill=spill)


def read_ranges(ranges: Sequence[OffsetRange], options: SourceOptions, *, spill: bool = False,
                resumes: Collection[int] = ()) -> Iterator[pa.RecordBatch]:
    """:func:`read_range` of each range in turn, the next range's fetch started before this one's read.

    A task that reads several ranges (``rangeGroups``) would otherwise ask Kafka for a partition
    only once it is done with the one before: a broker that takes a while to answer (the
    embedded one answers with the whole rest of the partition) then leaves the task idle. With
    ``prefetchRanges``, before a range is read, the consumer of the next range (of another
    partition) is leased and positioned, so librdkafka fetches it in the background meanwhile, at
    the cost of one more fetch in memory. Consecutive ranges of one partition are not opened
    early: the first one's consumer goes on to the second, nor are the ``resumes`` indexes
    (``RangeGroup.resumes``): pieces after a cut, whose records the task of the piece before the
    cut spills, to be read from there once this task comes to them.
    """
    opened: _Opened | None = None
    try:
        for index, rng in enumerate(ranges):
            current = opened if opened is not None else _open(rng, options, spill)
            opened = None
            following = ranges[index + 1] if index + 1 < len(ranges) else None
            if (options.prefetch_ranges and following is not None and index + 1 not in resumes
                    and (following.topic, following.partition) != (rng.topic, rng.partition)):
                try:
                    opened = _open(following, options, spill)
                except BaseException:
                    current.abandon()
                    raise
            yield from current.read()
            if current.fetched:
                release_memory()  # one fetch held at a time (jobs/host/memory.py)
    finally:
        if opened is not None:
            opened.abandon()


class _Opened:
    """A range ready to read: what the spill holds of it, then a positioned consumer for the rest."""

    def __init__(self, rng: OffsetRange, options: SourceOptions, served: list[pa.RecordBatch], *,
                 spilled: FetchSpill | None, skey: str, lease: Lease[Consumer] | None) -> None:
        self.rng, self.options, self.served = rng, options, served
        self.spilled, self.skey, self.lease = spilled, skey, lease
        self.reader = RangeReader(lease, rng, options) if lease is not None else None
        self.pending = self.reader.position() if self.reader is not None else []

    @property
    def fetched(self) -> bool:
        """Whether the range was read from Kafka (not only from the spill)."""
        return self.reader is not None

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
            if reusable and spilled is not None:
                try:
                    spill_surplus(lease, rng, spilled, self.skey, schema=schema, chunk_rows=CHUNK_ROWS)
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


def _open(rng: OffsetRange, options: SourceOptions, spill: bool) -> _Opened:
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
        return _Opened(rng, options, served, spilled=spilled, skey=skey, lease=lease)
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
