"""One task's pass over its share of a micro-batch: validate, write the Kafka outputs, count.

The job runs ``df.mapInArrow(batch_task(plan), TASK_SCHEMA)`` once per micro-batch: every task
reads its Kafka records once (with the kafka-py source: its offset ranges, read here),
validates each with the pipeline's parser (``plan.codec``, :mod:`jobs.streaming.codec`),
produces the analyzed record or the dead letter (the Kafka edge, :class:`TaskProducer`, flushed
before the task ends, so a batch never commits with undelivered records), adds the distinct
counts' items to the Redis HyperLogLogs (idempotent) and counts the other summary increments
and per-partition stats of its rows. Only
those counts go back to the driver, which sums them and applies them to Redis in one fenced
transaction. One Spark job per batch, no cache, no
shuffle: docs/explanation/streaming-performance.md has the measurements behind the choice.
"""

from __future__ import annotations

import json
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.host.memory import gc_paused, release_memory
from jobs.kafka.consumer import read_ranges
from jobs.kafka.offsets import OffsetRange
from jobs.kafka.options import parse_source_options
from jobs.kafka.sink import TaskProducer
from jobs.streaming.aggregates import INCREMENT_SCHEMA, MEMBERS_ADDED, increment_arrow_schema, increment_row
from jobs.streaming.codec import Counter, RecordCodec
from jobs.streaming.dead_letters import dead_letter_headers, dead_letter_value
from jobs.streaming.stream_time import StreamCursors, later

Partition = tuple[str, int]
STATS_KIND = "_stats"
TASK_KIND = "_task"
"""One row per task, its timings as JSON in ``label`` (:func:`task_timings`)."""
TASK_SCHEMA = INCREMENT_SCHEMA
"""Increment rows, plus one ``_stats`` row per (topic, partition, applicable) with JSON in ``label``."""
STAT_COUNTS = ("input_rows", "valid_rows", "dlq_rows", "late_rows")
RANGE_COLUMNS = ("topic", "partition", "startOffset", "endOffset", "resumes")


@dataclass(frozen=True)
class TaskPlan:
    """What every task of one batch does; shipped to the executors with the function."""

    codec: RecordCodec
    """The pipeline's per-record functions (:func:`jobs.streaming.codec.stream_codec`)."""
    rules: Any
    """The codec's validation rules."""
    windows: Any
    """The codec's window sizes."""
    grace_ms: int
    """A valid record is late when its event time is more than this below its stream time."""
    stream_points: Mapping[Partition, Mapping[int, int | None]]
    """Known stream times per partition (offset -> stream time): jobs/streaming/stream_time.py."""
    fence: Mapping[Partition, int]
    analyzed_topic: str | None
    dlq_topic: str | None
    kafka: Mapping[str, str]
    flush_timeout_ms: int = 120_000
    count: bool = True
    source: Mapping[str, str] | None = None
    """The Kafka read's options when the input is offset ranges (``emitRanges``), else None."""
    redis: tuple[tuple[str, Any], ...] | None = None
    """Redis client arguments: the tasks add their distinct items to the HyperLogLogs themselves."""
    redis_prefix: str = "kappa"
    fenced: bool = False
    """The driver has seen the fence hash in Redis: a task that finds it gone after adding its
    members removes them (a Redis that lost the view keeps none: members.pfadd_fenced)."""

    @property
    def produces(self) -> bool:
        """Whether the tasks write the Kafka outputs."""
        return self.analyzed_topic is not None and self.dlq_topic is not None


def batch_task(plan: TaskPlan) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of a batch (TASK_SCHEMA out).

    Its input is the Kafka source's columns, or with ``plan.source`` the source's offset ranges
    (``emitRanges``), which the task reads itself (:func:`task_records`).
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        clock = PhaseClock()
        producer = TaskProducer(plan.kafka, plan.flush_timeout_ms) if plan.produces else None
        increments = plan.codec.counter(plan.windows) if plan.count else None
        stats: dict[tuple[str, int, bool], list[Any]] = {}
        cursors = StreamCursors(plan)
        with gc_paused():
            try:
                records = task_records(batches, plan.source)
                while (batch := next(records, None)) is not None:
                    clock.lap("read")
                    _one_batch(batch, plan, producer, increments, stats, cursors=cursors)
                    clock.lap("process")
                clock.lap("read")
                # the HyperLogLog adds (idempotent) while librdkafka still delivers the outputs
                rows = _add_members(plan, increments) if increments is not None and plan.redis else []
                clock.lap("members")
            except BaseException:
                if producer is not None:
                    producer.discard()
                raise
            if producer is not None:
                producer.finish()
            clock.lap("flush")
            rows += increments.rows() if increments is not None else []
            rows += [_stats_row(key, value) for key, value in stats.items()]
            output = pa.RecordBatch.from_pylist(rows, schema=increment_arrow_schema()) if rows else None
            del rows, increments, stats
            clock.lap("output")
        release_memory()
        clock.lap("trim")
        if output is not None:
            yield output
        yield pa.RecordBatch.from_pylist([clock.row()], schema=increment_arrow_schema())

    return run


class PhaseClock:
    """Milliseconds spent in each phase, summed where a phase recurs.

    A batch's ``phases_ms`` on the driver; a task's :data:`TASK_KIND` row on an executor.
    """

    def __init__(self) -> None:
        self.began = self.last = time.monotonic()
        self.ms: dict[str, float] = {}

    def lap(self, name: str) -> None:
        """Charge the time since the last lap (or the start) to ``name``."""
        now = time.monotonic()
        self.ms[name] = self.ms.get(name, 0.0) + (now - self.last) * 1000
        self.last = now

    @property
    def laps(self) -> dict[str, int]:
        """Whole milliseconds per phase."""
        return {name: int(ms) for name, ms in self.ms.items()}

    def row(self) -> dict[str, Any]:
        """The task's :data:`TASK_KIND` row: its phases and the whole task (``task``)."""
        label = self.laps | {"task": int((self.last - self.began) * 1000)}
        return increment_row(TASK_KIND, 0, "", 0, label=json.dumps(label))


def _add_members(plan: TaskPlan, increments: Counter) -> list[dict[str, Any]]:
    """PFADD the task's distinct-count items (idempotent, no fence needed); one row per window touched.

    They are most of a batch's increment keys (one per item and window, and one per item all
    time); added here, they never travel to the driver (docs/streaming.md, "Redis keys").
    """
    from jobs.streaming.members import write_members
    from jobs.streaming.redis_sink import Keys, task_client

    assert plan.redis is not None
    members = increments.take_members()
    if members:
        write_members(task_client(plan.redis), Keys(plan.redis_prefix), members, plan.codec.distinct,
                      fenced=plan.fenced)
    return members_added(members)


def members_added(members: Mapping[int, list[str]]) -> list[dict[str, Any]]:
    """The increment rows that tell the driver which distinct-count windows a task added to (its index)."""
    return [increment_row(MEMBERS_ADDED, start, "", len(ids)) for start, ids in members.items() if start >= 0]


def task_records(batches: Iterator[pa.RecordBatch], source: Mapping[str, str] | None
                 ) -> Iterator[pa.RecordBatch]:
    """The task's Kafka records: its input, or read here from the offset ranges it was given.

    Reading the ranges in the task (the source emitting only ``emitRanges`` rows) keeps the
    records out of the JVM: they never cross from the source's Python worker into Spark rows and
    back into this worker as Arrow (docs/explanation/streaming-performance.md).
    """
    if source is None:
        yield from batches
        return
    options = parse_source_options(source, streaming=True)
    rows = [row for batch in batches
            for row in zip(*(batch.column(name).to_pylist() for name in RANGE_COLUMNS), strict=True)]
    # in the order planned (a piece cut by rangeGroups first, the piece after a cut last); with
    # prefetchRanges the next partition's fetch starts before this one is read, except for a
    # piece after a cut: the other task's spill serves it (jobs/kafka/consumer.py)
    yield from read_ranges([OffsetRange(*row[:4]) for row in rows], options, spill=True,
                           resumes={index for index, row in enumerate(rows) if row[4]})


def kafka_millis(batch: pa.RecordBatch) -> list[int | None]:
    """The Kafka timestamps of a source batch in epoch milliseconds (None where absent)."""
    return [us // 1000 if us is not None else None
            for us in batch.column("timestamp").cast(pa.int64()).to_pylist()]


def _one_batch(batch: pa.RecordBatch, plan: TaskPlan, producer: TaskProducer | None,
               increments: Counter | None, stats: dict[tuple[str, int, bool], list[Any]], *,
               cursors: StreamCursors) -> None:
    """Validate, produce and count one source batch, a run of one topic-partition at a time.

    A batch the task reads itself holds one topic-partition in offset order; one from Spark's
    own Kafka source may not. Each (topic, partition) run in offset order is cut where its
    offsets reach the partition's fence: the records before are not applicable (already applied
    to Redis by an earlier attempt), the ones from there on are. The record loop
    (:func:`_records`) then carries no per-record bookkeeping of topic, partition or fence.
    """
    if not batch.num_rows:
        return
    keys, values = batch.column("key").to_pylist(), batch.column("value").to_pylist()
    offsets, millis = batch.column("offset").to_pylist(), kafka_millis(batch)
    for (topic, partition), order in _partition_runs(batch, offsets):
        keys_, values_, millis_ = ((keys, values, millis) if order is None
                                   else ([column[i] for i in order] for column in (keys, values, millis)))
        offsets_: list[int] = offsets if order is None else [offsets[i] for i in order]
        cut = bisect_left(offsets_, plan.fence.get((topic, partition), 0))
        stream_ms = cursors.at(topic, partition, offsets_[0])
        for lo, hi, applicable in ((0, cut, False), (cut, len(offsets_), True)):
            if lo >= hi:
                continue
            valid, dlq, late, max_event, stream_ms = _records(
                zip(keys_[lo:hi], values_[lo:hi], offsets_[lo:hi], millis_[lo:hi], strict=True),
                topic, partition, plan, stream_ms, producer=producer,
                increments=increments if applicable else None)
            st = stats.get((topic, partition, applicable))
            if st is None:
                st = stats[(topic, partition, applicable)] = [0, 0, 0, 0, offsets_[lo], offsets_[lo], None,
                                                              None]
            st[0] += hi - lo
            st[1] += valid
            st[2] += dlq
            st[3] += late
            st[4], st[5] = min(st[4], offsets_[lo]), max(st[5], offsets_[hi - 1])
            if max_event is not None and (st[6] is None or max_event > st[6]):
                st[6] = max_event
            st[7] = later(st[7], stream_ms)
        cursors.moved(topic, partition, offsets_[-1] + 1, stream_ms)
    if producer is not None:
        producer.poll()


def _partition_runs(batch: pa.RecordBatch, offsets: list[int]
                    ) -> list[tuple[tuple[str, int], list[int] | None]]:
    """The batch's (topic, partition) runs: each with its rows' order by offset (None: as they are)."""
    topics, partitions = batch.column("topic"), batch.column("partition")
    first = (topics[0].as_py(), partitions[0].as_py())
    if (pc.all(pc.equal(topics, first[0])).as_py() and pc.all(pc.equal(partitions, first[1])).as_py()
            and bool(np.all(np.diff(np.asarray(offsets)) > 0))):
        return [(first, None)]
    runs: dict[tuple[str, int], list[int]] = {}
    for index, key in enumerate(zip(topics.to_pylist(), partitions.to_pylist(), strict=True)):
        runs.setdefault(key, []).append(index)
    return [(key, sorted(rows, key=offsets.__getitem__)) for key, rows in runs.items()]


def _records(rows: Iterator[tuple[Any, Any, Any, Any]], topic: str, partition: int, plan: TaskPlan,
             stream_ms: int | None, *, producer: TaskProducer | None, increments: Counter | None
             ) -> tuple[int, int, int, int | None, int | None]:
    """The record loop over rows of one topic-partition in offset order.

    Returns (valid, dead-lettered, late, max event ms, stream time after the rows); ``stream_ms``
    is the stream time at the first row. ``increments``: where the rows' summary counts go
    (None: the rows are not applicable).
    """
    rules, grace, codec = plan.rules, plan.grace_ms, plan.codec
    parse, event_ms, analyzed = codec.parse, codec.event_ms, codec.analyzed
    analyzed_value, analyzed_key = codec.analyzed_value, codec.analyzed_key
    valid = dlq = late = 0
    max_event: int | None = None
    count = increments.add if increments is not None else None
    for key, value, offset, kafka_ms in rows:
        parsed, reason = parse(value, kafka_ms, rules)
        if reason is not None:
            dlq += 1
            if producer is not None:
                producer.produce(plan.dlq_topic, dead_letter_value(value), key, headers=dead_letter_headers(
                    reason, topic, partition, offset, len(value) if value is not None else 0))
            continue
        mtime = event_ms(parsed)
        record = analyzed(parsed, topic, partition, offset, kafka_ms,
                          late=stream_ms is not None and mtime < stream_ms - grace)
        valid += 1
        late += record["late"]
        if stream_ms is None or mtime > stream_ms:
            stream_ms = mtime
        if max_event is None or mtime > max_event:
            max_event = mtime
        if producer is not None:
            producer.produce(plan.analyzed_topic, analyzed_value(record), record[analyzed_key].encode())
        if count is not None:
            count(record)
    return valid, dlq, late, max_event, stream_ms


def _stats_row(key: tuple[str, int, bool], st: list[Any]) -> dict[str, Any]:
    topic, partition, applicable = key
    label = {"topic": topic, "partition": partition, "applicable": applicable,
             **dict(zip(STAT_COUNTS, st[:4], strict=True)),
             "min_offset": st[4], "max_offset": st[5], "max_event_ms": st[6], "stream_ms": st[7]}
    return increment_row(STATS_KIND, 0, f"{topic}/{partition}/{applicable}", st[0], label=json.dumps(label))
