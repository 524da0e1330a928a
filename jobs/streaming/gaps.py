"""No silent gaps: a fence never moves past offsets it did not apply (docs/streaming.md, "The fence").

The Redis fence holds, per topic-partition, the next offset the summaries need. A run whose first
records of a partition lie beyond it would move the fence over records that were never counted:
the summaries would be short for good, with nothing to say so. Two checks refuse that:

- :func:`check_replay_start`, before Spark starts: a new run's start offsets against the fence
  (or, where the fence has no offset yet, the earliest retained offset);
- :func:`check_batch_start`, per batch on the driver: the first offset applied to a partition
  the fence has no offset for yet, against the partition's earliest retained offset.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from jobs.config.load import KappaConfig
from jobs.errors import ConfigError
from jobs.kafka.client import consumer_config

Partition = tuple[str, int]
TIMEOUT_S = 15.0
REMEDY = ("replay from the fence instead (`--from earliest`: records below the fence are read and "
          "skipped, never counted twice), or rebuild every view from the earliest offset as a new "
          "view version with `kappa reprocess start` (docs/runbooks/redis-lost.md)")


class FenceGapError(ConfigError):
    """Applying would move a fence past offsets it never applied (a range to fix, exit 2: no retry)."""


def check_replay_start(cfg: KappaConfig, starting: Any, fence: Mapping[Partition, int]) -> None:
    """Refuse a run into the Redis summaries whose start would leave records uncounted.

    ``starting`` is the run's start (``earliest``, ``latest``, offsets JSON as a dict, or a
    datetime); ``fence`` the summaries' fence. Records below the fence are harmless (skipped).
    """
    if starting == "earliest" or starting is None:
        return
    topic = cfg.streaming.source_topic
    consumer = Consumer(consumer_config(cfg.kafka.client_config(), "kappa-gap-check"))
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions)
        marks = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S, cached=False)
                 for p in partitions}
        start = _start_offsets(consumer, topic, starting, marks)
    finally:
        consumer.close()
    gaps = [_gap(topic, p, fence.get((topic, p)), marks[p][0], start[p]) for p in partitions if p in start]
    found = [gap for gap in gaps if gap is not None]
    if found:
        raise FenceGapError("this run would move the Redis fence past records it never applies: "
                            + "; ".join(found) + f". Nothing was written; {REMEDY}")


def check_batch_start(batch_id: int, fence: Mapping[Partition, int], first: Mapping[Partition, int],
                      earliest: Mapping[Partition, int]) -> None:
    """Refuse a batch whose first applicable offset of a partition lies beyond the fence.

    ``first``: per partition, the first offset the batch read at or above the fence; ``earliest``:
    the log start of partitions the fence has no offset for.
    """
    found = [gap for (topic, p), offset in sorted(first.items())
             if (gap := _gap(topic, p, fence.get((topic, p)), earliest.get((topic, p), offset), offset))]
    if found:
        raise FenceGapError(f"batch {batch_id} would move the Redis fence past records it never "
                            f"applies: {'; '.join(found)}. Its effects were not applied; {REMEDY}")


def _gap(topic: str, partition: int, fenced: int | None, earliest: int, start: int) -> str | None:
    floor = fenced if fenced is not None else earliest
    if start <= floor:
        return None
    where = f"fence at offset {fenced}" if fenced is not None else "no fence (nothing applied yet)"
    return (f"{topic}/{partition}: {where}, the run starts at offset {start}, so offsets "
            f"{floor}-{start - 1} ({start - floor} records) would never be counted")


def _start_offsets(consumer: Consumer, topic: str, starting: Any,
                   marks: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    if starting == "latest":
        return {p: high for p, (_, high) in marks.items()}
    if isinstance(starting, datetime):
        ms = int(starting.timestamp() * 1000)
        found = consumer.offsets_for_times([TopicPartition(topic, p, ms) for p in marks], timeout=TIMEOUT_S)
        return {tp.partition: tp.offset if tp.offset >= 0 else marks[tp.partition][1] for tp in found}
    if isinstance(starting, Mapping):
        given = starting.get(topic, {})
        return {int(p): (marks[int(p)][0] if int(o) == -2 else marks[int(p)][1] if int(o) == -1 else int(o))
                for p, o in given.items() if int(p) in marks}
    return {}
