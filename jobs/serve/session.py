"""One client's stream: catch-up after a resume point, then the live fan-out, gap-free.

Resume: the hub's ring buffer serves a resume point it still covers; otherwise a short-lived
reader on the resume pool reads Kafka from the resume point up to the hub's position at that
moment, then the ring is asked again (it now covers the short rest). Joining the live fan-out
happens in the same event-loop step as the ring read, so nothing is missed or sent twice.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from functools import partial

from jobs.serve import positions
from jobs.serve.hub import Item, Subscriber, not_retained
from jobs.serve.kafka_io import ResumeReader, in_thread, log_bounds
from jobs.serve.records import Record, Status
from jobs.serve.service import Service

MAX_ROUNDS = 5
LIVE_BATCH = 256


def welcome(service: Service, subscriber: Subscriber, position: str) -> Status:
    """The first message of a connection: its filter and the position it starts after."""
    return Status("connected", {"id": position, "filter": subscriber.filter.describe(),
                                "client_buffer": subscriber.limit})


async def beyond_log(service: Service, resume: positions.Vector) -> str | None:
    """Why a resume vector is no position of the followed topics; None when it may be one.

    Ids ahead of this service's position are fine as long as Kafka has those offsets (another
    instance issued them: the client gets nothing twice); an offset past a partition's end
    was never issued for this log (the topic was recreated, or the id was made up).
    """
    hub = service.running_hub()
    ahead = [stream for stream, offsets in resume.items() if stream in hub.position
             and any(o > now for o, now in zip(offsets, hub.position[stream], strict=False))]
    if not ahead:
        return None
    bounds = await in_thread(service.pool, log_bounds, service.kafka,
                             {stream: service.topics[stream] for stream in ahead})
    for stream in ahead:
        for partition, (offset, (_, end)) in enumerate(zip(resume[stream], bounds[stream], strict=False)):
            if offset > end:
                return (f"event id is past the end of the log: partition {partition} of "
                        f"{service.topics[stream]} ends at offset {end}, the id says {offset} (was the "
                        "topic recreated?); reconnect without Last-Event-ID to start from the live position")
    return None


async def items(service: Service, subscriber: Subscriber,
                resume: positions.Vector | None) -> AsyncIterator[list[Item]]:
    """Yield the client's messages in order: catch-up batches, then live batches, until overflow."""
    hub = service.running_hub()
    try:
        if resume is None:
            hub.attach(subscriber)
        else:
            try:
                async for batch in _catch_up(service, subscriber, resume):
                    yield batch
            except (TimeoutError, RuntimeError) as exc:
                yield [Status("resume_failed", {"detail": f"{exc}; reconnect to retry"})]
                return
        while True:
            batch = await subscriber.take(LIVE_BATCH)
            yield batch
            if subscriber.overflowed and any(isinstance(i, Status) and i.status == "overflow"
                                             for i in batch):
                return
    finally:
        hub.detach(subscriber)


async def _catch_up(service: Service, subscriber: Subscriber,
                    resume: positions.Vector) -> AsyncIterator[list[Item]]:
    hub = service.running_hub()
    streams = set(subscriber.filter.streams)
    current = positions.merge_missing(resume, hub.position)
    deadline = time.monotonic() + service.cfg.serve.catchup_timeout_s
    for round_ in range(MAX_ROUNDS):
        missed = hub.join(subscriber, current)
        if round_ == 0:  # counted once its source is known, not when it ends
            service.metrics.resumes.labels("ring" if missed is not None else "kafka").inc()
        if missed is not None:
            if missed:
                yield list(missed)
            return
        lost = await _retention(service, streams, current)
        if lost:
            yield [lost]
        async for batch in _read_kafka(service, subscriber, streams, current, deadline):
            yield batch
    raise TimeoutError(f"resume could not reach the live position in {MAX_ROUNDS} rounds")


async def _retention(service: Service, streams: set[str], current: positions.Vector) -> Status | None:
    topics = {stream: service.topics[stream] for stream in streams}
    bounds = await in_thread(service.pool, log_bounds, service.kafka, topics)
    gaps = []
    for stream in streams:
        for partition, (low, _) in enumerate(bounds[stream][: len(current[stream])]):
            if current[stream][partition] < low:
                gaps.append({"stream": stream, "partition": partition,
                             "from_offset": current[stream][partition], "earliest_retained": low})
                current[stream][partition] = low
    if not gaps:
        return None
    service.metrics.not_retained.inc()
    return not_retained(gaps, "some events after your Last-Event-ID are no longer retained by "
                              "Kafka; streaming resumes from the earliest retained ones")


async def _read_kafka(service: Service, subscriber: Subscriber, streams: set[str],
                      current: positions.Vector, deadline: float) -> AsyncIterator[list[Item]]:
    hub = service.running_hub()
    target = positions.copy(hub.position)
    topics = {stream: service.topics[stream] for stream in streams}
    reader = await in_thread(service.pool, partial(ResumeReader, shape=service.shape), service.kafka,
                             topics, current, target, service.cfg.serve.consumer_batch)
    try:
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"resume read did not finish within "
                                   f"{service.cfg.serve.catchup_timeout_s}s")
            records: list[Record] = await in_thread(service.pool, reader.read)
            if not records:
                break
            out: list[Item] = []
            for record in records:
                current[record.stream][record.partition] = record.offset + 1
                if subscriber.filter.matches(record) and not hub.before_switch(record):
                    out.append(record.with_id(positions.encode(current, hub.version)))
            if out:
                yield out
    finally:
        await in_thread(service.pool, reader.close)
    for stream in streams:
        current[stream] = [max(a, b) for a, b in zip(current[stream], target[stream], strict=True)]
