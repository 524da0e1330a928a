"""One task's pass over its records (``batch_task``, no Kafka outputs, no Redis): stats by hand.

A batch the task reads itself holds one partition in offset order; one from Spark's own Kafka
source may mix partitions and orders. Either way each record counts once, under its partition
and on its side of the partition's fence, and only the applicable ones reach the increments.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from jobs.kafka.arrow import arrow_schema
from jobs.streaming.task import TaskPlan, batch_task
from pipelines.rsvp.aggregates import Windows
from pipelines.rsvp.records import RECORDS
from pipelines.rsvp.validate import Rules

from .test_transforms import T0, record

RAW = "rsvps.raw"
WINDOWS = Windows(city_ms=60_000, trending_ms=600_000, trending_slide_ms=60_000, members_ms=60_000)


def _row(partition: int, offset: int, value: bytes) -> dict[str, Any]:
    return {"key": None, "value": value, "topic": RAW, "partition": partition, "offset": offset,
            "timestamp": None, "timestampType": 0}


GRACE_MS = 60_000


def _run(rows: list[dict[str, Any]], fence: dict[tuple[str, int], int],
         points: dict[tuple[str, int], dict[int, int | None]] | None = None
         ) -> tuple[dict[tuple[int, bool], dict[str, Any]], dict[str, tuple[int, int, int]]]:
    """Run one task over ``rows``; ``points``: known stream times (default: none before the first row)."""
    if points is None:
        points = {}
        for row in rows:
            first = points.setdefault((RAW, row["partition"]), {row["offset"]: None})
            if row["offset"] < min(first):
                points[(RAW, row["partition"])] = {row["offset"]: None}
    plan = TaskPlan(codec=RECORDS, rules=Rules(min_event_ms=946_684_800_000, future_skew_ms=300_000,
                                max_record_bytes=2_000),
                    windows=WINDOWS, grace_ms=GRACE_MS, stream_points=points, fence=fence,
                    analyzed_topic=None, dlq_topic=None, kafka={})

    def source() -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pylist(rows, schema=arrow_schema(False))

    out = pa.Table.from_batches(list(batch_task(plan)(source()))).to_pylist()
    stats = {}
    for row in out:
        if row["kind"] == "_stats":
            label = json.loads(row["label"])
            stats[(label["partition"], label["applicable"])] = {
                name: label[name] for name in ("input_rows", "valid_rows", "dlq_rows", "late_rows",
                                               "min_offset", "max_offset", "max_event_ms", "stream_ms")}
    events = {row["item"]: (row["n"], row["n2"], row["n3"]) for row in out if row["kind"] == "event"}
    return stats, events


def _stats(input_rows: int, valid: int, dlq: int, late: int, offsets: tuple[int, int],
           max_event: int | None, stream_ms: int | None) -> dict[str, Any]:
    return {"input_rows": input_rows, "valid_rows": valid, "dlq_rows": dlq, "late_rows": late,
            "min_offset": offsets[0], "max_offset": offsets[1], "max_event_ms": max_event,
            "stream_ms": stream_ms}


def test_a_mixed_batch_counts_each_record_under_its_partition_and_side_of_the_fence() -> None:
    rows = [
        _row(1, 11, record(mtime=T0, event__event_id="e1")),
        _row(0, 5, record(mtime=T0 + 1000, response="no", event__event_id="e1")),
        _row(0, 3, b"not json"),
        _row(1, 10, record(mtime=T0 + 2000, event__event_id="e2")),
        _row(0, 4, record(mtime=T0 + 500, event__event_id="e2")),
    ]
    rows[0]["value"] = record(mtime=T0 - 60_000, event__event_id="e1")
    # partition 0 continues from a stream time of T0 + 60.8 s at offset 3 (late below T0 + 0.8 s);
    # partition 1 has nothing before offset 10
    points = {(RAW, 0): {3: T0 + 60_800}, (RAW, 1): {10: None}}
    stats, events = _run(rows, fence={(RAW, 0): 5, (RAW, 1): 11}, points=points)
    assert stats == {
        (0, False): _stats(2, 1, 1, 1, (3, 4), T0 + 500, T0 + 60_800),   # 3 dead-lettered, 4 late
        (0, True): _stats(1, 1, 0, 0, (5, 5), T0 + 1000, T0 + 60_800),   # T0 + 1 s: on time
        (1, False): _stats(1, 1, 0, 0, (10, 10), T0 + 2000, T0 + 2000),  # first: on time
        (1, True): _stats(1, 1, 0, 1, (11, 11), T0 - 60_000, T0 + 2000),  # 62 s behind T0 + 2 s
    }
    # only offsets 5 and 11 are applicable: e1 has one yes (1 guest) and one no; e2 nothing
    assert events == {"e1": (1, 1, 1)}


def test_a_partition_in_offset_order_is_cut_at_its_fence() -> None:
    rows = [_row(2, offset, record(mtime=T0 + offset, event__event_id=f"e{offset}"))
            for offset in (20, 21, 22, 23)]
    stats, events = _run(rows, fence={(RAW, 2): 22})
    assert stats == {(2, False): _stats(2, 2, 0, 0, (20, 21), T0 + 21, T0 + 21),
                     (2, True): _stats(2, 2, 0, 0, (22, 23), T0 + 23, T0 + 23)}
    assert events == {"e22": (1, 0, 1), "e23": (1, 0, 1)}


def test_without_a_fence_every_record_is_applicable() -> None:
    rows = [_row(0, 7, record(mtime=T0)), _row(0, 8, b"{}")]
    stats, _ = _run(rows, fence={})
    assert list(stats) == [(0, True)]
    assert stats[(0, True)]["input_rows"] == 2 and stats[(0, True)]["dlq_rows"] == 1
