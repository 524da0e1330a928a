"""Keyed state that keeps the kappa promise: decided by Kafka order, the same in every run.

A pipeline with ``state: {key}`` keeps one value per key (e.g. a card's previous transaction);
the source topic is keyed by the same field, so one partition holds a key's whole history and
its records come to one task in offset order.

Where the state of a key is before a batch:

- **Fenced partition** (the view has applied offsets before): Redis key ``P:state:<key>``, written
  in the batch's fenced apply. Each entry records the offset of the record that set it (``at``)
  and the entry it replaced (``from``), so the state *as of the fence* is always readable, also
  when an attempt of the batch crashed after some of its chunks were applied or when Spark runs
  an applied batch again: ``at`` below the fence is the entry, else its ``from``.
- **Unfenced partition starting after the log's first offset** (a bounded replay, a rebuild of a
  range): the task reads the partition from its first retained offset up to the range's start and
  folds the state (and the stream time) from those records with the same ``parse`` and
  ``analyze`` (:func:`fold_before`), writing nothing. Its cost grows with the records before the
  range; a topic whose retention is longer than ``state.ttl_s`` holds every state that can
  still matter.

The Redis entries expire ``2 * state.ttl_s`` after they are written (processing time), so the
state kept is bounded; ``analyze`` treats a previous value older than ``ttl_s`` of event time as
absent, so an expired entry changes no decision unless a run pauses for longer than ``ttl_s``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from jobs.engine.plan import Partition, PipelinePlan
from jobs.kafka.consumer import read_ranges
from jobs.kafka.offsets import OffsetRange
from jobs.kafka.options import parse_source_options
from jobs.pipelines.define import Definitions, Reject
from jobs.pipelines.spec import PipelineSpec
from jobs.streaming.task import kafka_millis

Entry = tuple[Any, int]
"""A key's state and the offset of the record that set it."""
STATE = "state"


def state_key(prefix: str, key: Any) -> str:
    """The Redis key of one key's state."""
    return f"{prefix}:{STATE}:{key}"


def as_of(raw: str | bytes | None, fence: int) -> Entry | None:
    """The state a stored entry says the key had at ``fence`` (module docstring)."""
    if raw is None:
        return None
    entry = json.loads(raw)
    if entry["at"] < fence:
        return entry["s"], entry["at"]
    before = entry.get("from")
    if before is not None and before["at"] < fence:
        return before["s"], before["at"]
    return None


class KeyedState:
    """The keyed state of one partition's records in a batch: before it, and as the records set it."""

    def __init__(self, plan: PipelinePlan, spec: PipelineSpec, fence: int | None) -> None:
        self.plan, self.fence = plan, fence
        self.key = spec.state.key if spec.state is not None else None
        self.ttl_s = spec.state.ttl_s if spec.state is not None else 0
        self.base: dict[str, Entry | None] = {}
        self.current: dict[str, Entry] = {}
        self._folded: dict[str, Entry] | None = None

    def start_from(self, folded: Mapping[str, Entry]) -> None:
        """An unfenced partition: the state before the batch is ``folded`` (empty: none)."""
        self._folded = dict(folded)

    def prefetch(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Read the state before the batch of every key in ``records`` not known yet (one round trip)."""
        if self.key is None:
            return
        wanted = sorted({str(r[self.key]) for r in records} - set(self.base) - set(self.current))
        if not wanted:
            return
        if self._folded is not None or self.fence is None:
            folded = self._folded or {}
            self.base |= {k: folded.get(k) for k in wanted}
            return
        from jobs.streaming.redis_sink import task_client

        raws = task_client(self.plan.redis).mget([state_key(self.plan.prefix, k) for k in wanted])
        self.base |= {k: as_of(raw, self.fence) for k, raw in zip(wanted, raws, strict=True)}

    def get(self, record: Mapping[str, Any]) -> Any:
        """The key's state before ``record``."""
        if self.key is None:
            return None
        k = str(record[self.key])
        entry = self.current.get(k) or self.base.get(k)
        return entry[0] if entry is not None else None

    def put(self, record: Mapping[str, Any], value: Any, offset: int) -> None:
        """The key's state after ``record`` (at ``offset``)."""
        if self.key is not None:
            self.current[str(record[self.key])] = (value, offset)

    def rows(self) -> list[dict[str, Any]]:
        """One row per key the batch changed: its new entry, with the one as of the fence."""
        rows = []
        for k, (value, at) in sorted(self.current.items()):
            before = self.base.get(k)
            was = None if before is None else {"at": before[1], "s": before[0]}
            entry = {"at": at, "s": value, "from": was}
            rows.append({"kind": STATE, "view": "", "op": "set", "rkey": f"{STATE}:{k}", "field": "",
                         "window": 2 * self.ttl_s, "n": at, "text": json.dumps(entry, sort_keys=True)})
        return rows


FUTURE_EVENT_TIME = "future_event_time"
"""The engine's own dead-letter reason: an event time further ahead of its Kafka timestamp than
``event_time.future_skew_s`` (a wrong clock would otherwise move the stream time and make every
later record of its partition late)."""


def too_far_ahead(record: Mapping[str, Any], spec: PipelineSpec, kafka_ms: int | None) -> bool:
    """Whether a parsed record's event time is too far ahead of its Kafka timestamp (a dead letter)."""
    event_ms = record.get(spec.event_time.field)
    return kafka_ms is not None and isinstance(event_ms, int) and (
        event_ms > kafka_ms + spec.event_time.future_skew_s * 1000)


def fold_before(plan: PipelinePlan, spec: PipelineSpec, code: Definitions, tp: Partition, *, start: int,
                end: int) -> tuple[int | None, dict[str, Entry]]:
    """The stream time and keyed state after the partition's records ``[start, end)``, nothing written."""
    if plan.source is None:
        raise RuntimeError("folding the state before a range needs the source's options (emitRanges)")
    options = parse_source_options(plan.source, streaming=True)
    event_field, key = spec.event_time.field, spec.state.key if spec.state is not None else None
    stream_ms: int | None = None
    state: dict[str, Entry] = {}
    params = dict(plan.params)
    for batch in read_ranges([OffsetRange(tp[0], tp[1], start, end)], options):
        columns = (batch.column("key").to_pylist(), batch.column("value").to_pylist(),
                   batch.column("offset").to_pylist(), kafka_millis(batch))
        for k, value, offset, kafka_ms in zip(*columns, strict=True):
            try:
                record = code.parse_fn(value, k, {**params, "kafka_ms": kafka_ms})  # type: ignore[misc]
            except Reject:
                continue
            if too_far_ahead(record, spec, kafka_ms):
                continue
            event_ms = int(record[event_field])
            stream_ms = event_ms if stream_ms is None else max(stream_ms, event_ms)
            if key is not None:
                previous = state.get(str(record[key]))
                _, value_after = code.analyze_fn(record, previous[0] if previous else None, params)  # type: ignore[misc]
                state[str(record[key])] = (value_after, offset)
    return stream_ms, state
