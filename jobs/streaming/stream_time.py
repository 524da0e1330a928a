"""Stream time: which records are late, decided by the log alone (docs/streaming.md, "Late records").

The stream time of a topic-partition at offset ``o`` is the largest event time of the valid
records at offsets below ``o`` (None when there are none). A valid record is *late* when its
event time is more than the grace (``streaming.watermark_s``) below the stream time at its own
offset. Both are functions of the partition's records in offset order, so every run over the
same log (live in small batches, a replay in large ones, a restart after a crash, a rebuild)
flags the same records: trigger timing, batch sizes and task splits do not enter.

A run continues the stream time from a *known point* ``(offset, stream time)``: the end of the
run's previous batch (``<checkpoint>/kappa-state/stream-time.json``), the Redis fence (which
records the stream time at each partition's fence), or the partition's earliest retained offset
(stream time None). A task whose range starts elsewhere reads the records between the nearest
known point below its start and the start to compute it (:func:`scan_stream_time`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from jobs.lake import statefs
from jobs.lake.statefs import Location

logger = logging.getLogger(__name__)

Partition = tuple[str, int]
Points = Mapping[Partition, Mapping[int, int | None]]
"""Known stream times: per topic-partition, offset -> stream time at that offset."""
KEEP_POINTS = 64
"""Points kept per partition in the checkpoint's file: a replayed batch starts at one of the last."""


def is_late(event_ms: int, stream_ms: int | None, grace_ms: int) -> bool:
    """Whether a record with ``event_ms`` is late at a position whose stream time is ``stream_ms``."""
    return stream_ms is not None and event_ms < stream_ms - grace_ms


def advance(stream_ms: int | None, event_ms: int) -> int:
    """The stream time after a valid record with ``event_ms``."""
    return event_ms if stream_ms is None or event_ms > stream_ms else stream_ms


def later(a: int | None, b: int | None) -> int | None:
    """The larger of two stream times (None is before everything)."""
    if a is None:
        return b
    return a if b is None or a >= b else b


def nearest_point(points: Mapping[int, int | None], offset: int) -> tuple[int, int | None] | None:
    """The known point at the largest offset not above ``offset`` (None: no such point)."""
    below = [o for o in points if o <= offset]
    if not below:
        return None
    best = max(below)
    return best, points[best]


class StreamTimeLog:
    """Known stream times of a query's partitions, beside its checkpoint (``kappa-state``).

    Written after a batch's effects and before Spark commits it, so a batch replayed after a crash
    starts from the point its first attempt started from.
    """

    NAME = "stream-time.json"

    def __init__(self, checkpoint: Location) -> None:
        self.path = checkpoint / "kappa-state" / self.NAME

    def points(self) -> dict[Partition, dict[int, int | None]]:
        """Every recorded point (empty when the query has none)."""
        try:
            data = json.loads(statefs.read(self.path))
        except FileNotFoundError:
            return {}
        return decode_points(data.get("points", {}))

    def record(self, ends: Mapping[Partition, tuple[int, int | None]]) -> None:
        """Add the stream time at each partition's new end offset; keep the last KEEP_POINTS each."""
        from jobs.streaming.state import write_json

        if not ends:
            return
        points = self.points()
        for tp, (offset, stream_ms) in ends.items():
            merged = points.setdefault(tp, {})
            merged[offset] = stream_ms
            for old in sorted(merged)[:-KEEP_POINTS]:
                del merged[old]
        write_json(self.path, {"points": encode_points(points)})


def encode_points(points: Points) -> dict[str, list[list[int | None]]]:
    """Points as JSON: ``{"topic:partition": [[offset, stream_ms], ...]}``."""
    return {f"{t}:{p}": [[o, s] for o, s in sorted(offsets.items())]
            for (t, p), offsets in sorted(points.items())}


def decode_points(data: Mapping[str, Iterable[Any]]) -> dict[Partition, dict[int, int | None]]:
    """The inverse of :func:`encode_points`."""
    points: dict[Partition, dict[int, int | None]] = {}
    for name, pairs in data.items():
        topic, _, partition = name.rpartition(":")
        points[(topic, int(partition))] = {int(o): (None if s is None else int(s)) for o, s in pairs}
    return points


def merge_points(*sources: Points) -> dict[Partition, dict[int, int | None]]:
    """Several sources of known points as one (the same offset always has the same stream time)."""
    merged: dict[Partition, dict[int, int | None]] = {}
    for source in sources:
        for tp, offsets in source.items():
            merged.setdefault(tp, {}).update(offsets)
    return merged


SCAN_BATCH = 5000
SCAN_TIMEOUT_S = 60.0


class StreamTimeUnavailable(RuntimeError):
    """The records before a range could not be read to compute its stream time."""


class StreamCursors:
    """A task's stream time per partition as it goes through its rows in offset order.

    ``plan``: the task's plan (``stream_points``, ``codec``, ``rules``, ``kafka``).
    """

    def __init__(self, plan: Any) -> None:
        self.plan = plan
        self._at: dict[Partition, tuple[int, int | None]] = {}

    def at(self, topic: str, partition: int, offset: int) -> int | None:
        """The stream time at ``offset``: where the task left the partition, a known point, or a scan."""
        tp = (topic, partition)
        candidates = dict(self.plan.stream_points.get(tp, {}))
        here = self._at.get(tp)
        if here is not None and here[0] <= offset:
            candidates[here[0]] = here[1]
        near = nearest_point(candidates, offset)
        if near is not None and near[0] == offset:
            return near[1]
        return scan_stream_time(self.plan, topic, partition, near, offset)

    def moved(self, topic: str, partition: int, offset: int, stream_ms: int | None) -> None:
        """Record that the task's rows of the partition end before ``offset`` at ``stream_ms``."""
        self._at[(topic, partition)] = (offset, stream_ms)


def scan_stream_time(plan: Any, topic: str, partition: int, near: tuple[int, int | None] | None,
                     offset: int) -> int | None:
    """The stream time at ``offset``, from the known point ``near`` below it and the records between.

    With no known point, from the partition's earliest retained offset (stream time None there).
    A run takes this path for its first range when it starts where no run recorded a point (a new
    query starting mid-log, a range cut between two tasks): the records are read, not processed.
    """
    from confluent_kafka import Consumer, TopicPartition

    from jobs.kafka.client import consumer_config

    parse, event_ms = plan.codec.parse, plan.codec.event_ms
    consumer = Consumer(consumer_config(dict(plan.kafka), "kappa-stream-time"))
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=SCAN_TIMEOUT_S,
                                                cached=False)
        start, stream_ms = (low, None) if near is None else (max(near[0], low), near[1])
        if start >= offset:
            return stream_ms
        consumer.assign([TopicPartition(topic, partition, start)])
        position, scanned = start, 0
        while position < offset:
            # no more than the records left to read: consume() waits for its count or the timeout
            messages = consumer.consume(min(SCAN_BATCH, offset - position), timeout=SCAN_TIMEOUT_S)
            if not messages:
                raise StreamTimeUnavailable(
                    f"no records from {topic}/{partition} at offset {position} in {SCAN_TIMEOUT_S:.0f} s "
                    f"while reading offsets {start}-{offset - 1} for the stream time at {offset}")
            for message in messages:
                if message.error() is not None:
                    raise StreamTimeUnavailable(f"{topic}/{partition}: {message.error()}")
                at = int(message.offset() or 0)
                position = at + 1
                if at >= offset:
                    position = offset
                    break
                scanned += 1
                kind, millis = message.timestamp()
                record, reason = parse(message.value(), millis if kind else None, plan.rules)
                if reason is None:
                    stream_ms = advance(stream_ms, event_ms(record))
        logger.info("stream time topic=%s partition=%d offset=%d from=%d scanned=%d stream_ms=%s",
                    topic, partition, offset, start, scanned, stream_ms)
        return stream_ms
    finally:
        consumer.close()
