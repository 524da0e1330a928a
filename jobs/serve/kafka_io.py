"""Kafka edges of the service: one shared consumer per topic, and short-lived resume readers.

The shared consumer is assigned every partition of its topic at the high watermark found at
start (no consumer group, nothing committed: positions travel in event ids) and hands parsed
batches to the hub on the event loop. A feed with nothing to read pauses its partitions: some
brokers (the embedded noida-db among them) answer a fetch at once instead of holding it for
``fetch.wait.max.ms``, so a caught-up consumer would otherwise fetch in a busy loop (most of a
core in the service and half of one in the broker). Paused, it asks for the high watermarks,
one request per topic, at growing intervals (``IDLE_NAP_S``), every ``IDLE_LONG_NAP_S`` once
idle for ``IDLE_LONG_AFTER_S``, and resumes when they move.

A resume reader is assigned from a client's position vector up to the hub's position at that
moment and is closed when it gets there.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from jobs.kafka.client import admin_config
from jobs.serve import continuity
from jobs.serve.records import Record, StreamShape

logger = logging.getLogger(__name__)

POLL_S = 0.2
HIGHS_REFRESH_S = 1.0
METADATA_TIMEOUT_S = 10.0
IDLE_NAP_S = (0.01, 0.05)  # first and longest wait between two high-watermark checks of an idle feed
IDLE_LONG_AFTER_S = 5.0  # a feed idle this long checks every IDLE_LONG_NAP_S (docs/runbooks/serve.md)
IDLE_LONG_NAP_S = 0.25
CONSUMER_DEFAULTS = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "fetch.wait.max.ms": 50,
    "receive.message.max.bytes": 128 * 1024 * 1024,
    "log_level": 3,
}


def consumer(client_config: dict[str, Any], purpose: str, **extra: Any) -> Consumer:
    """A consumer that never joins a group (partitions are assigned explicitly)."""
    return Consumer({**CONSUMER_DEFAULTS, **client_config, **extra,
                     "group.id": f"kappa-serve-{purpose}-{uuid.uuid4().hex[:8]}"})


def watermarks(client: Consumer, topic: str) -> list[tuple[int, int]]:
    """(low, high) offsets of every partition of a topic, in partition order."""
    metadata = client.list_topics(topic, timeout=METADATA_TIMEOUT_S).topics.get(topic)
    if metadata is None or metadata.error is not None or not metadata.partitions:
        reason = metadata.error if metadata is not None else "not found"
        raise RuntimeError(f"topic {topic!r} is not readable ({reason}); create it with "
                           "`kappa topics apply` or point serve.*_topic at an existing one")
    return [client.get_watermark_offsets(TopicPartition(topic, p), timeout=METADATA_TIMEOUT_S)
            for p in sorted(metadata.partitions)]


class SharedFeed:
    """One consumer thread for one topic, fanned out through the hub."""

    def __init__(self, stream: str, topic: str, client_config: dict[str, Any], batch: int,
                 deliver: Callable[[list[Record]], None], *, shape: StreamShape,
                 on_gap: Callable[[str, int, int], None] | None = None,
                 after: Mapping[tuple[str, int], int] | None = None) -> None:
        """``after``: source positions already delivered; start where they end (a view switch)."""
        self.stream, self.topic, self.batch = stream, topic, batch
        self._deliver, self._shape = deliver, shape
        self._on_gap = on_gap or (lambda stream, partition, low: None)
        # "error", not a silent reset: when retention passes the feed's position (it fell behind,
        # or records were deleted) the hub must tell every client what was lost.
        self._consumer = consumer(client_config, stream, **{"auto.offset.reset": "error"})
        try:
            bounds = watermarks(self._consumer, topic)
            self.start_offsets = ([high for _, high in bounds] if after is None
                                  else continuity.start_offsets(self._consumer, topic, bounds, after))
        except BaseException:
            self._consumer.close()  # a topic that is not readable: nothing would close it
            raise
        self._consumer.assign([TopicPartition(topic, p, offset)
                               for p, offset in enumerate(self.start_offsets)])
        self._partitions = [TopicPartition(topic, p) for p in range(len(self.start_offsets))]
        self._admin = AdminClient({**admin_config(client_config), "log_level": 3})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"serve-feed-{stream}", daemon=True)
        self.last_poll = time.monotonic()
        self.errors = 0
        self.malformed = 0
        self.last_error: str | None = None
        self.highs = list(self.start_offsets)  # high watermarks as last fetched (this thread only)

    def start(self) -> None:
        """Start polling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop polling and close the consumer."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._consumer.close()

    def healthy(self, stale_s: float = 10.0) -> bool:
        """Whether the thread runs and polled recently."""
        return self._thread.is_alive() and time.monotonic() - self.last_poll < stale_s

    def _run(self) -> None:
        refreshed, was_idle = 0.0, False
        while not self._stop.is_set():
            messages = (self._first_messages() if was_idle
                        else self._consumer.consume(self.batch, timeout=POLL_S))
            self.last_poll = time.monotonic()
            records = list(self._records(messages))
            if records:
                self._deliver(records)
            was_idle = not messages
            if was_idle:
                self._idle()
            elif self.last_poll - refreshed > HIGHS_REFRESH_S:
                refreshed = self.last_poll
                self.highs = [int(self._consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), cached=True)[1]) for p in range(len(self.start_offsets))]

    def _first_messages(self) -> list[Any]:
        """After an idle spell: what is there as soon as the first record arrives (no batching wait)."""
        first = self._consumer.poll(POLL_S)
        if first is None:
            return []
        return [first, *(self._consumer.consume(self.batch - 1, timeout=0) if self.batch > 1 else [])]

    def _idle(self) -> None:
        """Nothing came for one poll: stop fetching until a high watermark passes the position."""
        self._consumer.pause(self._partitions)
        nap, began = IDLE_NAP_S[0], time.monotonic()
        while not self._stop.wait(nap):
            self.last_poll = time.monotonic()
            if self._records_waiting():
                self._consumer.resume(self._partitions)
                self._wake_fetcher()
                return
            long_idle = self.last_poll - began >= IDLE_LONG_AFTER_S
            nap = IDLE_LONG_NAP_S if long_idle else min(2 * nap, IDLE_NAP_S[1])

    def _wake_fetcher(self) -> None:
        """Make librdkafka fetch the resumed partitions now.

        With every partition paused its broker thread sleeps up to a second between wake-ups,
        and a resume does not wake it; a request on that thread (a watermark query) does.
        """
        try:
            self._consumer.get_watermark_offsets(self._partitions[0], timeout=METADATA_TIMEOUT_S)
        except KafkaException as exc:
            logger.debug("stream=%s topic=%s watermark query failed: %s", self.stream, self.topic, exc)

    def _records_waiting(self) -> bool:
        """Whether a partition has records past the feed's position (True when unsure)."""
        try:
            futures = self._admin.list_offsets({tp: OffsetSpec.latest() for tp in self._partitions},
                                               request_timeout=METADATA_TIMEOUT_S)
            highs = [int(futures[tp].result().offset) for tp in self._partitions]
            positions = self._consumer.position(self._partitions)
        except KafkaException as exc:
            logger.debug("stream=%s topic=%s high watermarks unknown (%s); fetching", self.stream,
                         self.topic, exc)
            return True
        self.highs = highs
        return any(high > (tp.offset if tp.offset >= 0 else start)
                   for high, tp, start in zip(highs, positions, self.start_offsets, strict=True))

    def _records(self, messages: list[Any]) -> Iterator[Record]:
        for message in messages:
            error = message.error()
            if error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET:
                self._skip_to_retained(message.partition())
                continue
            if error is not None:
                self.errors += 1
                self.last_error = str(message.error())
                logger.warning("stream=%s topic=%s consumer error: %s", self.stream, self.topic,
                               message.error())
                continue
            record = self._shape.record(self.stream, message.partition(), message.offset(),
                                        message.timestamp()[1], message.value())
            if record is None:
                self.malformed += 1
                logger.debug("stream=%s partition=%d offset=%d not a JSON object; skipped",
                             self.stream, message.partition(), message.offset())
                continue
            yield record


    def _skip_to_retained(self, partition: int) -> None:
        """The feed's position is no longer retained: seek to the earliest offset, report the gap."""
        low = int(self._consumer.get_watermark_offsets(TopicPartition(self.topic, partition),
                                                       timeout=METADATA_TIMEOUT_S)[0])
        logger.warning("stream=%s topic=%s partition=%d: position no longer retained by Kafka; "
                       "continuing from the earliest retained offset %d", self.stream, self.topic,
                       partition, low)
        self._consumer.seek(TopicPartition(self.topic, partition, low))
        self._on_gap(self.stream, partition, low)


class ResumeReader:
    """Reads [from, to) of every partition of the given streams once, then closes (a thread)."""

    def __init__(self, client_config: dict[str, Any], topics: dict[str, str],
                 start: dict[str, list[int]], end: dict[str, list[int]], batch: int, *,
                 shape: StreamShape) -> None:
        self.topics, self.batch, self._shape = topics, batch, shape
        self.remaining = {(stream, p): end[stream][p]
                          for stream in topics for p in range(len(end[stream]))
                          if start[stream][p] < end[stream][p]}
        self._consumer = consumer(client_config, "resume", **{"enable.partition.eof": True})
        if self.remaining:
            self._consumer.assign([
                TopicPartition(topics[stream], p, start[stream][p] if start[stream][p] >= 0
                               else OFFSET_BEGINNING)
                for stream, p in self.remaining])
        self._streams = {topic: stream for stream, topic in topics.items()}

    def read(self) -> list[Record]:
        """The next records in offset order per partition; [] once every partition is done."""
        out: list[Record] = []
        while self.remaining and not out:
            for message in self._consumer.consume(self.batch, timeout=POLL_S):
                self._take(message, out)
        return out

    def _take(self, message: Any, out: list[Record]) -> None:
        stream = self._streams[message.topic()]
        key = (stream, message.partition())
        end = self.remaining.get(key)
        if end is None:
            return
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF and message.offset() >= end:
                del self.remaining[key]
            elif error.code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(f"resume read of {message.topic()}[{message.partition()}]: {error}")
            return
        if message.offset() >= end:
            del self.remaining[key]
            return
        record = self._shape.record(stream, message.partition(), message.offset(), message.timestamp()[1],
                                    message.value())
        if record is not None:
            out.append(record)
        if message.offset() + 1 >= end:
            del self.remaining[key]

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()


def log_bounds(client_config: dict[str, Any], topics: dict[str, str]) -> dict[str, list[tuple[int, int]]]:
    """(first retained, next to be written) offsets of every partition of each stream."""
    client = consumer(client_config, "watermarks")
    try:
        return {stream: watermarks(client, topic) for stream, topic in topics.items()}
    finally:
        client.close()


async def in_thread(pool: Any, func: Callable[..., Any], *args: Any) -> Any:
    """Run a blocking Kafka call on the resume pool."""
    return await asyncio.get_running_loop().run_in_executor(pool, func, *args)
