"""The task's garbage-collector pause (pure logic: the interpreter's own gc switch)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pyarrow as pa
import pytest

from jobs.host.memory import gc_paused
from jobs.kafka.arrow import arrow_schema
from jobs.streaming.task import TaskPlan, batch_task
from pipelines.rsvp.aggregates import Windows
from pipelines.rsvp.records import RECORDS
from pipelines.rsvp.validate import Rules


@pytest.fixture(autouse=True)
def _gc_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_gc_is_off_inside_and_on_again_after_even_when_the_block_raises() -> None:
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError, match="boom"), gc_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_collector_already_off_stays_off() -> None:
    gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_the_task_reads_and_counts_its_records_with_the_collector_off() -> None:
    seen: list[bool] = []

    def source() -> Iterator[pa.RecordBatch]:
        seen.append(gc.isenabled())
        yield pa.RecordBatch.from_pylist(
            [{"key": None, "value": b"not json", "topic": "rsvps.raw", "partition": 0, "offset": 7,
              "timestamp": None, "timestampType": 0}], schema=arrow_schema(False))
        seen.append(gc.isenabled())

    plan = TaskPlan(codec=RECORDS,
                    rules=Rules(min_event_ms=0, future_skew_ms=60_000, max_record_bytes=1 << 20),
                    windows=Windows(city_ms=60_000, trending_ms=600_000, trending_slide_ms=60_000,
                                    members_ms=60_000),
                    grace_ms=60_000, stream_points={("rsvps.raw", 0): {7: None}}, fence={},
                    analyzed_topic=None, dlq_topic=None, kafka={})
    out = pa.Table.from_batches(list(batch_task(plan)(source())))
    assert seen == [False, False]
    assert gc.isenabled()
    kinds = out.column("kind").to_pylist()
    assert kinds.count("_stats") == 1 and kinds.count("_task") == 1
