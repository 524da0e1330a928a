"""Read one offset range of one topic-partition from a leased, positioned consumer.

:class:`RangeReader` stops at the range's end and keeps records fetched past it (``leftover``);
offsets missing inside the range are normal on compacted or transactional topics (commit markers
take offsets) and data loss only when the start is below the log start offset. The pool, the
spill and the order of a task's ranges are :mod:`jobs.kafka.consumer`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from jobs.errors import KafkaSourceError
from jobs.kafka import dataloss
from jobs.kafka.arrow import to_record_batch
from jobs.kafka.client import REQUEST_TIMEOUT_S
from jobs.kafka.dataloss import DataLoss
from jobs.kafka.offsets import OffsetRange
from jobs.kafka.options import SourceOptions
from jobs.kafka.pool import Lease

logger = logging.getLogger(__name__)

MAX_BATCH_ROWS = 20_000
POLL_S = 0.2
WATERMARK_CHECK_S = 1.0
OUT_OF_RANGE = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}
PERMANENT_LOCAL = {KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError._SSL,
                   KafkaError._AUTHENTICATION, KafkaError._INVALID_ARG}


class RangeReader:
    """The records of one range from a leased consumer: :meth:`position`, then :meth:`batches`."""


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
