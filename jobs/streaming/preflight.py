"""Checks before a query starts: are the offsets its checkpoint resumes from still in Kafka?"""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import Consumer, TopicPartition

from jobs.config.load import KappaConfig
from jobs.kafka.client import consumer_config
from jobs.lake.statefs import Location
from jobs.streaming.state import CheckpointError, last_offsets

logger = logging.getLogger(__name__)
TIMEOUT_S = 15.0


def watermarks(cfg: KappaConfig, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
    """(earliest, latest) offset of each topic-partition."""
    consumer = Consumer(consumer_config(cfg.kafka.client_config(), "kappa-preflight"))
    try:
        return {(t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=TIMEOUT_S, cached=False)
                for t, p in partitions}
    finally:
        consumer.close()


def record_timestamp(cfg: KappaConfig, topic: str, partition: int, offset: int) -> int | None:
    """The timestamp (ms) of the record at ``offset``, or None when it cannot be read."""
    props = {**cfg.kafka.client_config(), "group.id": "kappa-preflight", "enable.auto.commit": False,
             "receive.message.max.bytes": 100_000_000}
    consumer = Consumer(props)
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        message = consumer.poll(10.0)
        if message is None or message.error():
            return None
        return int(message.timestamp()[1])
    finally:
        consumer.close()


def check_retention(cfg: KappaConfig, checkpoint: Location, query: str, *, skip: bool,
                    progress: Callable[[str], None]) -> list[str]:
    """Report checkpointed offsets Kafka no longer retains; raise unless ``skip``.

    Returns the problems found (empty when the checkpoint resumes inside the retained log).
    """
    last = last_offsets(checkpoint)
    if last is None:
        return []
    batch_id, offsets = last
    positions = {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}
    marks = watermarks(cfg, sorted(positions))
    problems = [f"{t}-{p} resumes at offset {o}, earliest retained is {marks[(t, p)][0]} "
                f"({marks[(t, p)][0] - o} records lost)"
                for (t, p), o in sorted(positions.items()) if o < marks[(t, p)][0]]
    if not problems:
        return []
    text = "; ".join(problems)
    if skip:
        progress(f"warning: query {query} skips records Kafka no longer retains: {text}")
        return problems
    raise CheckpointError(
        f"query {query}: its checkpoint (batch {batch_id}) resumes at offsets Kafka no longer "
        f"retains: {text}. Start with --skip-lost to continue from the earliest retained offsets "
        "(the lost records are reported, not processed), or reset the checkpoint to a time with "
        f"`kappa stream checkpoint reset {query} --to <timestamp>` (docs/runbooks/checkpoint.md)")
