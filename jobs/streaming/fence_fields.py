"""The fields of the Redis fence hash: next offset and stream time per topic-partition."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Partition = tuple[str, int]

STREAM_SUFFIX = ":stream_ms"
"""Fence hash fields ``<topic>:<partition>:stream_ms``: the stream time at the partition's fence."""


def parse_fence(raw: Mapping[Any, Any]) -> dict[Partition, int]:
    """The fence hash as next offsets per topic-partition (its other fields left out)."""
    fence: dict[Partition, int] = {}
    for name, value in raw.items():
        tp = field_partition(name)
        if tp is not None:
            fence[tp] = int(value)
    return fence


def parse_stream_points(raw: Mapping[Any, Any]) -> dict[Partition, dict[int, int | None]]:
    """The stream time the fence recorded at each partition's fenced offset (stream_time.py)."""
    fence = parse_fence(raw)
    points: dict[Partition, dict[int, int | None]] = {}
    for raw_name, raw_value in raw.items():
        name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
        if not name.endswith(STREAM_SUFFIX):
            continue
        tp = field_partition(name.removesuffix(STREAM_SUFFIX))
        if tp is not None and tp in fence:
            value = raw_value.decode() if isinstance(raw_value, bytes) else raw_value
            points[tp] = {fence[tp]: int(value) if value else None}
    return points


def field_partition(field: str) -> Partition | None:
    """``"<topic>:<partition>"`` as (topic, partition); None for another field."""
    topic, sep, partition = field.rpartition(":")
    return (topic, int(partition)) if sep and partition.isdigit() else None
