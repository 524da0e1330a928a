"""The fan-out hub: one position vector, one ring buffer, every client's bounded queue.

Runs entirely on the service's event loop: the shared consumers hand it batches with
``loop.call_soon_threadsafe``, it stamps each record with the position vector after it
(its event id), keeps it in the ring buffer for resumes, and offers it to every subscriber.
Offering never waits: a subscriber whose queue is full is marked overflowed and gets a final
status message; its sender ends the connection (docs/api.md, "Slow clients").
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from jobs.serve import positions
from jobs.serve.records import Filter, Record, Status

logger = logging.getLogger(__name__)

Item = Record | Status


def not_retained(gaps: list[dict[str, Any]], detail: str) -> Status:
    """The ``not_retained`` status: each partition's lost range and how many events at most."""
    return Status("not_retained", {
        "detail": detail, "gaps": gaps,
        "lost_at_most": sum(g["earliest_retained"] - g["from_offset"] for g in gaps)})


class Subscriber:
    """One connected client: its filter and a bounded queue of what it has not been sent yet."""

    def __init__(self, flt: Filter, limit: int, warn_fraction: float,
                 floor: dict[str, list[int]] | None = None) -> None:
        self.filter = flt
        self.limit = limit
        self.warn_at = max(1, int(limit * warn_fraction))
        self.floor = floor or {}
        self.queue: deque[Item] = deque()
        self.pending = 0  # records (not status messages) in the queue
        self.overflowed = False
        self.warned = False
        self.sent = 0
        self._wake = asyncio.Event()

    def offer(self, record: Record) -> bool:
        """Queue a live record if it matches; return False when this client just overflowed."""
        if self.overflowed or not self.filter.matches(record):
            return True
        floor = self.floor.get(record.stream)
        if floor and record.partition < len(floor) and record.offset < floor[record.partition]:
            return True
        if self.pending >= self.limit:
            self.overflowed = True
            self.queue.append(Status("overflow", {
                "detail": f"more than {self.limit} events waited for this client; it is disconnected. "
                          "Reconnect with Last-Event-ID (EventSource does it by itself) to resume "
                          "after the last event received.",
                "buffered": self.pending, "limit": self.limit}))
            self._wake.set()
            return False
        self.queue.append(record)
        self.pending += 1
        if not self.warned and self.pending >= self.warn_at:
            self.warned = True
            self.queue.append(Status("lagging", {
                "detail": "this client reads slower than events arrive",
                "buffered": self.pending, "limit": self.limit}))
        self._wake.set()
        return True

    def push_status(self, status: Status, first: bool = False) -> None:
        """Queue a service message (``first``: ahead of queued events)."""
        if first:
            self.queue.appendleft(status)
        else:
            self.queue.append(status)
        self._wake.set()

    async def take(self, most: int) -> list[Item]:
        """Wait for queued items and return up to ``most`` of them, in order."""
        while not self.queue:
            self._wake.clear()
            await self._wake.wait()
        count = min(most, len(self.queue))
        items = [self.queue.popleft() for _ in range(count)]
        self.pending -= sum(isinstance(item, Record) for item in items)
        if self.warned and self.pending < self.warn_at // 2:
            self.warned = False
        return items


class Hub:
    """Position vector, ring buffer and subscribers of the streams one service follows."""

    def __init__(self, start: dict[str, list[int]], ring_size: int,
                 on_overflow: Callable[[], None] | None = None, version: int = 1) -> None:
        self.version = version
        self.position = positions.copy(start)
        self.ring: deque[Record] = deque(maxlen=ring_size) if ring_size else deque(maxlen=0)
        self.ring_start = positions.copy(start)
        self.subscribers: set[Subscriber] = set()
        self.received = 0
        self.skipped = 0
        self.delivered: dict[tuple[str, int], int] = {}
        """Highest source offset per source partition fanned out (analyzed records)."""
        self.source_floor: dict[tuple[str, int], int] = {}
        """Source positions the previous version's stream delivered: not sent again after a switch."""
        self._on_overflow = on_overflow or (lambda: None)

    def publish(self, records: list[Record]) -> None:
        """Stamp, buffer and fan out a batch from one shared consumer (event loop only)."""
        ring, subscribers = self.ring, self.subscribers
        for record in records:
            offsets = self.position[record.stream]
            if record.partition >= len(offsets) or record.offset < offsets[record.partition]:
                self.skipped += 1
                continue
            offsets[record.partition] = record.offset + 1
            if record.source is not None and not self._first_delivery(record.source):
                self.skipped += 1
                continue
            stamped = record.with_id(positions.encode(self.position, self.version))
            self.received += 1
            if ring.maxlen:
                if len(ring) == ring.maxlen:
                    old = ring[0]
                    self.ring_start[old.stream][old.partition] = old.offset + 1
                ring.append(stamped)
            else:
                self.ring_start[record.stream][record.partition] = record.offset + 1
            for subscriber in list(subscribers):
                if not subscriber.offer(stamped):
                    self._on_overflow()

    def before_switch(self, record: Record) -> bool:
        """Whether the previous version's stream delivered this analyzed record's source position."""
        return record.source is not None and record.source[2] <= self.source_floor.get(record.source[:2], -1)

    def _first_delivery(self, source: tuple[str, int, int]) -> bool:
        """Whether a source position is new to the clients (then remember it as delivered)."""
        key, offset = source[:2], source[2]
        if offset <= self.source_floor.get(key, -1):
            return False
        if offset > self.delivered.get(key, -1):
            self.delivered[key] = offset
        return True

    def skip(self, stream: str, partition: int, low: int) -> Status | None:
        """The shared feed lost ``[position, low)`` to retention: move on and tell every client.

        The ring no longer covers a resume point before ``low`` (a resume there catches up from
        Kafka and gets its own ``not_retained``), and each live subscriber of the stream gets a
        ``not_retained`` status in order, before the records after the gap.
        """
        offsets = self.position[stream]
        if partition >= len(offsets) or low <= offsets[partition]:
            return None
        gap = {"stream": stream, "partition": partition, "from_offset": offsets[partition],
               "earliest_retained": low}
        offsets[partition] = low
        self.ring_start[stream][partition] = max(self.ring_start[stream][partition], low)
        status = not_retained([gap], "some live events were deleted from Kafka before this "
                                     "service read them; streaming continues from the earliest "
                                     "retained ones")
        for subscriber in list(self.subscribers):
            if stream in subscriber.filter.streams:
                subscriber.push_status(status)
        return status

    def join(self, subscriber: Subscriber, resume: dict[str, list[int]]) -> list[Record] | None:
        """Attach a subscriber after ``resume``: the ring's records it missed, or None.

        None means the ring no longer holds everything after ``resume`` (the caller catches up
        from Kafka first). Returning the missed records and attaching happen in one step of the
        event loop, so the live records that follow continue exactly where they end.
        """
        streams = set(subscriber.filter.streams)
        if not positions.covers(self.ring_start, resume, streams):
            return None
        missed = [record for record in self.ring
                  if record.stream in streams
                  and record.offset >= resume[record.stream][record.partition]
                  and subscriber.filter.matches(record)]
        subscriber.floor = {stream: offsets for stream, offsets in resume.items()
                            if any(o > now for o, now in zip(offsets, self.position[stream], strict=True))}
        self.subscribers.add(subscriber)
        return missed

    def switch(self, start: dict[str, list[int]], version: int, status: Status) -> None:
        """Follow another view version: its topics' positions, an empty ring, every client told.

        Each subscriber gets ``status`` (``view_switched``) and then the new version's records,
        whose ids carry the new version; its resume floor belonged to the old topics and goes.
        The new version's analyzed records of source positions delivered before are dropped
        (``start`` lies at or before the first new one: jobs/serve/continuity.py).
        """
        self.source_floor = {key: max(offset, self.source_floor.get(key, -1))
                             for key, offset in self.delivered.items()}
        self.version = version
        self.position, self.ring_start = positions.copy(start), positions.copy(start)
        self.ring.clear()
        for subscriber in list(self.subscribers):
            subscriber.floor = {}
            subscriber.push_status(status)

    def attach(self, subscriber: Subscriber) -> None:
        """Attach a subscriber that starts live, from the current position."""
        self.subscribers.add(subscriber)

    def detach(self, subscriber: Subscriber) -> None:
        """Forget a subscriber (its connection ended)."""
        self.subscribers.discard(subscriber)

    def state(self) -> dict[str, Any]:
        """Positions and sizes for /healthz."""
        return {"position": positions.encode(self.position, self.version), "ring_records": len(self.ring),
                "ring_start": positions.encode(self.ring_start, self.version),
                "clients": len(self.subscribers), "received": self.received, "view_version": self.version}
