"""Mirror a query's checkpointed offsets to a Kafka consumer group, for lag tools only.

The checkpoint stays the source of truth: the group is written *after* Spark commits a batch
(``DataSourceStreamReader.commit``) and is never read back. Spark calls ``commit(end)`` when it
plans the *next* batch, so the group trails the query by one batch, and the last batch of an
availableNow run is never mirrored by the source; jobs call :func:`commit_final_offsets` after
``awaitTermination()`` to close that gap. A failed group commit is logged, never fatal.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from jobs.kafka.client import admin_config
from jobs.kafka.offsets import Offsets, from_json, to_json

logger = logging.getLogger(__name__)


class GroupCommitter:
    """Commits offsets for one group id with a consumer that never joins the group."""

    def __init__(self, kafka: Mapping[str, str], group: str) -> None:
        self._props = admin_config(kafka) | {"group.id": group, "enable.auto.commit": "false"}
        self._group = group
        self._consumer: Consumer | None = None

    def commit(self, offsets: Offsets) -> bool:
        """Commit ``offsets`` (next offset to read per partition); True when Kafka accepted them."""
        if not offsets:
            return True
        if self._consumer is None:
            self._consumer = Consumer(self._props)
        request = [TopicPartition(topic, partition, offset)
                   for (topic, partition), offset in sorted(offsets.items())]
        try:
            self._consumer.commit(offsets=request, asynchronous=False)
        except KafkaException as exc:
            logger.warning("kafka group commit failed group=%s offsets=%s error=%s; lag tools show "
                           "older offsets, the query itself is not affected", self._group,
                           to_json(offsets), exc)
            return False
        logger.debug("kafka group commit group=%s partitions=%d", self._group, len(request))
        return True

    def close(self) -> None:
        """Close the consumer (it never joined, so no rebalance happens)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def final_offsets(progress: Mapping[str, Any] | None) -> Offsets:
    """The Kafka end offsets of a query's last progress (``query.lastProgress``), merged."""
    offsets: Offsets = {}
    for source in (progress or {}).get("sources", []):
        end = source.get("endOffset")
        data = json.loads(end) if isinstance(end, str) else end
        if isinstance(data, dict) and all(isinstance(v, dict) for v in data.values()):
            offsets |= from_json(data)
    return offsets


def commit_final_offsets(progress: Mapping[str, Any] | None, kafka: Mapping[str, str],
                         group: str) -> Offsets:
    """Mirror the last batch of a finished query (e.g. availableNow) to ``group``.

    Call it only after ``query.awaitTermination()`` returned without error: then every batch
    in the progress is committed to the checkpoint.
    """
    offsets = final_offsets(progress)
    committer = GroupCommitter(kafka, group)
    try:
        committer.commit(offsets)
    finally:
        committer.close()
    return offsets
