"""Known records of the Kafka tests, as the broker acknowledged them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Produced:
    """One record as the broker acknowledged it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int
    headers: tuple[tuple[str, bytes | None], ...] | None = None


def expected(records: list[Produced]) -> list[tuple]:
    """(partition, offset, key, value) rows of acknowledged records, sorted."""
    return sorted((r.partition, r.offset, r.key, r.value) for r in records)
