"""A dead letter of any pipeline: the original bytes, cut to a bound, and the reason headers.

The headers carry the collector's names (docs/streaming.md, "Dead letters"), so the loader and
operators read one shape whichever tier refused the record.
"""

from __future__ import annotations

MAX_DLQ_VALUE_BYTES = 1 << 20


def dead_letter_headers(reason: str, topic: str, partition: int, offset: int,
                        size: int) -> list[tuple[str, bytes]]:
    """The reason headers of a dead letter (the collector's names), plus the original size if cut."""
    headers = [
        ("kappa.reason", reason.encode()),
        ("kappa.source", f"stream:{topic}/{partition}/{offset}".encode()),
        ("kappa.source_topic", topic.encode()),
        ("kappa.source_partition", str(partition).encode()),
        ("kappa.source_offset", str(offset).encode()),
    ]
    if size > MAX_DLQ_VALUE_BYTES:
        headers.append(("kappa.original_bytes", str(size).encode()))
    return headers


def dead_letter_value(value: bytes | None) -> bytes | None:
    """The original bytes, cut to MAX_DLQ_VALUE_BYTES."""
    if value is not None and len(value) > MAX_DLQ_VALUE_BYTES:
        return value[:MAX_DLQ_VALUE_BYTES]
    return value
