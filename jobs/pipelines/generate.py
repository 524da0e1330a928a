"""What ``kappa generate --pipeline NAME`` asks of a pipeline's generator.

A pipeline that has one names a Python file beside its ``pipeline.yaml`` (``generator:``); the file
defines ``lines(options)``, which checks the options (``ValueError`` with the reason for one it
cannot honour) and returns the generated records in order::

    def lines(options: GenerateOptions) -> Iterator[Line]:
        ...

The file is imported on its own, without the pipeline's code, so generating stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class GenerateOptions:
    """The options of one ``kappa generate`` run, as a generator receives them."""

    count: int | None
    """How many records (None: endless)."""
    seed: int
    """Same seed and ``start_ms``, same records."""
    start_ms: int
    """Event time of the first record, epoch ms."""
    oversize_bytes: int
    """The size of an oversize record: more than the collector accepts."""
    events_per_second: float | None = None
    """How fast the generator's clock of event time runs (None: the generator's own pace)."""
    late: float = 0.0
    out_of_order: float = 0.0
    duplicates: float = 0.0
    malformed: float = 0.0
    """Fractions of the records that are late, out of order, re-sent or malformed."""
    malformed_kinds: tuple[str, ...] | None = None
    """The kinds of malformed record to draw from (None: every kind the generator has)."""


class Line(Protocol):
    """One generated record: its bytes (one JSON document) and its Kafka key."""

    @property
    def line(self) -> bytes:
        """The record as sent."""

    @property
    def key(self) -> bytes | None:
        """The Kafka key when producing straight to a topic (None: no key)."""


Lines = Callable[[GenerateOptions], Iterator[Line]]
"""A generator file's ``lines`` function."""
