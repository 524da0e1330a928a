"""Deterministic Meetup-style RSVP events, with injectable faults.

For a seed (and a start time) the generator yields the same lines in the same order. Each
:class:`Generated` item says what it is (``ok``, ``late``, ``out_of_order``, ``duplicate`` or
``malformed:<code>``) and under which ``rsvp_id`` a collector accepts it, so tests know the
expected outcome without asking the code under test.

Event time (``mtime``) follows a virtual clock that advances ``1000 / events_per_second`` ms
per event from ``start_ms``; late events lie minutes behind it, out-of-order events seconds.
:func:`lines` is what ``kappa generate --pipeline rsvp`` runs (``generator:`` in pipeline.yaml).
"""

from __future__ import annotations

import json
import random
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from jobs.pipelines.generate import GenerateOptions
from pipelines.rsvp import schema
from pipelines.rsvp.catalog import build_catalog

MALFORMED_KINDS = (schema.INVALID_JSON, schema.MISSING_FIELD, schema.WRONG_TYPE, schema.OVERSIZE)
DEFAULT_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DEFAULT_EVENTS_PER_SECOND = 50.0
DEFAULT_OVERSIZE_BYTES = 70_000
FIRST_RSVP_ID = 1_800_000_000
LATE_MINUTES = (2.0, 30.0)
OUT_OF_ORDER_SECONDS = (1.0, 30.0)
DUPLICATE_WINDOW = 500
OK, LATE, OUT_OF_ORDER, DUPLICATE = "ok", "late", "out_of_order", "duplicate"
MALFORMED_PREFIX = "malformed:"


@dataclass(frozen=True)
class FaultMix:
    """Fractions of generated lines that carry each fault (each in [0, 1], summing to <= 1)."""

    late: float = 0.0
    out_of_order: float = 0.0
    duplicates: float = 0.0
    malformed: float = 0.0
    malformed_kinds: tuple[str, ...] = MALFORMED_KINDS

    def __post_init__(self) -> None:
        fractions = {"late": self.late, "out_of_order": self.out_of_order,
                     "duplicates": self.duplicates, "malformed": self.malformed}
        for name, value in fractions.items():
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a fraction between 0 and 1, got {value}")
        if sum(fractions.values()) > 1.0:
            raise ValueError(f"fault fractions add up to {sum(fractions.values()):.3f}; "
                             "they must add up to at most 1")
        unknown = sorted(set(self.malformed_kinds) - set(MALFORMED_KINDS))
        if unknown or not self.malformed_kinds:
            raise ValueError(f"malformed kinds {unknown or '(none)'} unknown; choose from "
                             f"{', '.join(MALFORMED_KINDS)}")


@dataclass(frozen=True)
class Generated:
    """One generated line and what the generator knows about it."""

    line: bytes
    kind: str
    rsvp_id: int | None

    @property
    def malformed(self) -> bool:
        """True for lines a collector must reject."""
        return self.kind.startswith(MALFORMED_PREFIX)

    @property
    def key(self) -> bytes | None:
        """The Kafka key: the ``rsvp_id`` as decimal bytes (None for a malformed line)."""
        return str(self.rsvp_id).encode() if self.rsvp_id is not None else None


def lines(options: GenerateOptions) -> Iterator[Generated]:
    """The RSVP lines of one ``kappa generate`` run.

    Raises:
        ValueError: a fault fraction or malformed kind is out of range.
    """
    kinds = MALFORMED_KINDS if options.malformed_kinds is None else options.malformed_kinds
    faults = FaultMix(options.late, options.out_of_order, options.duplicates, options.malformed, kinds)
    generator = RsvpGenerator(options.seed, faults, options.start_ms,
                              events_per_second=options.events_per_second or DEFAULT_EVENTS_PER_SECOND,
                              oversize_bytes=options.oversize_bytes)
    return generator.generate(options.count)


class RsvpGenerator:
    """Generate RSVP lines (JSON, no trailing newline) for a seed."""

    def __init__(
        self,
        seed: int = 0,
        faults: FaultMix | None = None,
        start_ms: int = DEFAULT_START_MS,
        events_per_second: float = DEFAULT_EVENTS_PER_SECOND,
        oversize_bytes: int = DEFAULT_OVERSIZE_BYTES,
    ) -> None:
        if events_per_second <= 0:
            raise ValueError(f"events_per_second must be positive, got {events_per_second}")
        self.seed = seed
        self.faults = faults or FaultMix()
        self.start_ms = start_ms
        self.step_ms = 1000.0 / events_per_second
        self.oversize_bytes = oversize_bytes
        self._catalog = build_catalog(seed, start_ms)

    def generate(self, count: int | None = None) -> Iterator[Generated]:
        """Yield ``count`` lines (endlessly when None)."""
        rng = random.Random(f"events-{self.seed}")
        recent: deque[Generated] = deque(maxlen=DUPLICATE_WINDOW)
        next_id = FIRST_RSVP_ID + self.seed % 1000 * 1_000_000_000
        index = 0
        while count is None or index < count:
            clock = self.start_ms + int(index * self.step_ms)
            kind = self._pick_kind(rng, bool(recent))
            if kind == DUPLICATE:
                original = rng.choice(recent)
                item = Generated(original.line, DUPLICATE, original.rsvp_id)
            else:
                next_id += rng.randint(1, 3)
                record = self._record(rng, next_id, self._event_time(rng, kind, clock))
                if kind.startswith(MALFORMED_PREFIX):
                    item = Generated(self._malform(rng, record, kind), kind, None)
                else:
                    item = Generated(_dumps(record), kind, next_id)
                    recent.append(item)
            yield item
            index += 1

    def _pick_kind(self, rng: random.Random, can_duplicate: bool) -> str:
        faults, draw = self.faults, rng.random()
        for kind, fraction in ((MALFORMED_PREFIX, faults.malformed), (DUPLICATE, faults.duplicates),
                               (LATE, faults.late), (OUT_OF_ORDER, faults.out_of_order)):
            if draw < fraction:
                if kind == MALFORMED_PREFIX:
                    return MALFORMED_PREFIX + rng.choice(faults.malformed_kinds)
                return kind if kind != DUPLICATE or can_duplicate else OK
            draw -= fraction
        return OK

    @staticmethod
    def _event_time(rng: random.Random, kind: str, clock: int) -> int:
        if kind == LATE:
            return clock - int(rng.uniform(*LATE_MINUTES) * 60_000)
        if kind == OUT_OF_ORDER:
            return clock - int(rng.uniform(*OUT_OF_ORDER_SECONDS) * 1000)
        return clock

    def _record(self, rng: random.Random, rsvp_id: int, mtime: int) -> dict[str, Any]:
        chosen = self._catalog.events.draw(rng)
        record: dict[str, Any] = {}
        if rng.random() < 0.95:
            record["venue"] = chosen["venue"]
        guests = 0 if rng.random() < 0.85 else rng.randint(1, 5)
        record.update({
            "visibility": "public" if rng.random() < 0.95 else "members",
            "response": "yes" if rng.random() < 0.85 else "no",
            "guests": guests,
            "member": self._catalog.members.draw(rng),
            "rsvp_id": rsvp_id,
            "mtime": mtime,
            "event": chosen["event"],
            "group": chosen["group"],
        })
        return record

    def _malform(self, rng: random.Random, record: dict[str, Any], kind: str) -> bytes:
        code = kind[len(MALFORMED_PREFIX):]
        if code == schema.INVALID_JSON:
            text = _dumps(record)
            return text[: rng.randrange(1, len(text) - 1)]
        if code == schema.MISSING_FIELD:
            record.pop(rng.choice(schema.REQUIRED_TOP_LEVEL))
        elif code == schema.WRONG_TYPE:
            name = rng.choice((schema.KEY_FIELD, schema.TIME_FIELD))
            record[name] = str(record[name]) if rng.random() < 0.5 else f"{record[name]}x"
        else:
            record["padding"] = "x" * self.oversize_bytes
        return _dumps(record)


def _dumps(record: Any) -> bytes:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()
