"""Where a view switch continues the analyzed stream: at the source position the old one stopped.

Both view versions analyze the same source log, and every analyzed record carries its source
position (``source_topic``, ``source_partition``, ``source_offset``). When the service switches
versions, the hub knows the highest source offset of each source partition it already fanned
out; the new version's feed starts, per partition, a little before the first record past those
(found by stepping back from the end, doubling the step), and the hub drops the records whose
source position was already delivered. Clients get every source position once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import Consumer, TopicPartition

from jobs.serve.records import source_in

FIRST_STEP = 256
READ_TIMEOUT_S = 5.0
SourceKey = tuple[str, int]


def start_offsets(client: Consumer, topic: str, bounds: list[tuple[int, int]],
                  delivered: Mapping[SourceKey, int]) -> list[int]:
    """Per partition of ``topic``: an offset at or before its first record not yet ``delivered``.

    With nothing delivered (the old stream fanned out no analyzed record) each partition starts
    at its end, like a service that starts.
    """
    if not delivered:
        return [high for _, high in bounds]
    return [_partition_start(client, topic, partition, low=low, high=high, delivered=delivered)
            for partition, (low, high) in enumerate(bounds)]


def _partition_start(client: Consumer, topic: str, partition: int, *, low: int, high: int,
                     delivered: Mapping[SourceKey, int]) -> int:
    position, step = high, FIRST_STEP
    while position > low:
        position = max(low, position - step)
        source = _source_at(client, topic, partition, position)
        step *= 2
        if source is None or delivered.get(source[:2], source[2]) >= source[2]:
            # delivered before the switch; one more step back covers records of other source
            # partitions that the same micro-batches interleaved with it
            return max(low, position - step)
    return low


def _source_at(client: Consumer, topic: str, partition: int, offset: int) -> tuple[str, int, int] | None:
    """The source position of the record at ``offset`` (None: none there, or it carries none)."""
    client.assign([TopicPartition(topic, partition, offset)])
    deadline = time.monotonic() + READ_TIMEOUT_S
    while time.monotonic() < deadline:
        message = client.poll(0.5)
        if message is None or message.error() or message.partition() != partition:
            continue
        return source_in(message.value())
    return None
