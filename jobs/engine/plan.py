"""What every task of a pipeline's micro-batch is given (shipped to the executors with the function)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Partition = tuple[str, int]


@dataclass(frozen=True)
class PipelinePlan:
    """What every task of one batch does; shipped to the executors with the function."""

    folder: str
    """The pipeline's folder: the executor loads its definition from there (once per worker)."""
    fence: Mapping[Partition, int]
    stream_ms: Mapping[Partition, int | None]
    """The stream time at each fenced partition's fence."""
    earliest: Mapping[Partition, int]
    """Unfenced partitions' first offsets in the log: a range starting later folds the part before."""
    kafka: Mapping[str, str]
    redis: tuple[tuple[str, Any], ...]
    prefix: str
    produce: bool = True
    source: Mapping[str, str] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    outputs: tuple[str, str] | None = None
    """The analyzed and dead-letter topics (default: the pipeline's)."""
    flush_timeout_ms: int = 120_000
