"""A micro-batch's metrics (``platform.metrics``, docs/streaming.md) and a run's totals.

:func:`batch_metrics` is pure: the summed task stats in, the metrics record out.
:class:`Lag` asks Kafka how far the query's positions are behind the latest offsets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from jobs.kafka.client import consumer_config
from jobs.streaming.state import BatchWatermark

METRICS_SCHEMA_VERSION = 1
Offsets = dict[str, dict[str, int]]


@dataclass
class Totals:
    """Counts over every batch a run processed (the replay report)."""

    batches: int = 0
    input_rows: int = 0
    valid_rows: int = 0
    dlq_rows: int = 0
    late_rows: int = 0
    applied_rows: int = 0
    analyzed_written: int = 0
    dlq_written: int = 0
    summaries_written: int = 0
    last_batch: dict[str, Any] = field(default_factory=dict)

    def add(self, metrics: Mapping[str, Any], written: Mapping[str, int]) -> None:
        """Fold one batch's metrics in."""
        self.batches += 1
        for name in ("input_rows", "valid_rows", "dlq_rows", "late_rows", "applied_rows"):
            setattr(self, name, getattr(self, name) + int(metrics[name]))
        self.analyzed_written += written.get("analyzed", 0)
        self.dlq_written += written.get("dlq", 0)
        if "summaries" in written:  # else the background apply counts them (its thread alone)
            self.summaries_written += written["summaries"]
        self.last_batch = dict(metrics)


def offset_bounds(stats: list[dict[str, Any]]) -> tuple[Offsets, Offsets]:
    """Each partition's first offset and the offset after its last, over a batch's stats."""
    start: Offsets = {}
    end: Offsets = {}
    for st in stats:
        topic, partition = st["topic"], str(st["partition"])
        first = min(start.get(topic, {}).get(partition, st["min_offset"]), st["min_offset"])
        start.setdefault(topic, {})[partition] = first
        last = max(end.get(topic, {}).get(partition, -1), st["max_offset"] + 1)
        end.setdefault(topic, {})[partition] = last
    return start, end


def batch_metrics(query: str, batch_id: int, stats: list[dict[str, Any]], used: BatchWatermark, *,
                  max_after: int | None, elapsed_s: float, counted: bool, behind: int | None,
                  emitted_ms: int) -> dict[str, Any]:
    """The metrics record of one batch (``counted``: the Redis summaries are a sink)."""
    def total(name: str, only_applicable: bool = False) -> int:
        return sum(st[name] for st in stats if st["applicable"] or not only_applicable)

    start, end = offset_bounds(stats)
    rows = total("input_rows")
    return {
        "schema_version": METRICS_SCHEMA_VERSION, "kind": "streaming_batch", "query": query,
        "batch_id": batch_id, "input_rows": rows, "valid_rows": total("valid_rows"),
        "dlq_rows": total("dlq_rows"), "late_rows": total("late_rows"),
        "applied_rows": total("valid_rows", only_applicable=True) if counted else 0,
        "rows_per_s": round(rows / elapsed_s, 1) if elapsed_s > 0 else 0.0,
        "batch_duration_ms": int(elapsed_s * 1000), "watermark_ms": used.watermark_ms,
        "max_event_ms": max_after, "start_offsets": start, "end_offsets": end,
        "offsets_behind_latest": behind, "emitted_ms": emitted_ms,
    }


class Lag:
    """Records behind the latest offsets, summed over the partitions the query has read."""

    def __init__(self, kafka: Mapping[str, str]) -> None:
        self.kafka = dict(kafka)
        self.positions: dict[tuple[str, int], int] = {}
        self._consumer: Consumer | None = None

    def advance(self, stats: list[dict[str, Any]]) -> int | None:
        """Move the positions past a batch's records; how far they are behind (None: none read)."""
        for topic, partitions in offset_bounds(stats)[1].items():
            for partition, last in partitions.items():
                tp = (topic, int(partition))
                self.positions[tp] = max(self.positions.get(tp, 0), last)
        if not self.positions:
            return None
        if self._consumer is None:
            self._consumer = Consumer(consumer_config(self.kafka, "kappa-stream-lag"))
        behind = 0
        for (name, index), position in self.positions.items():
            _, high = self._consumer.get_watermark_offsets(TopicPartition(name, index), timeout=10)
            behind += max(0, high - position)
        return behind

    def close(self) -> None:
        """Release the consumer."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
