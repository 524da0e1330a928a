"""The engine's pure parts: counting per view kind, merging tasks, keyed state as of a fence."""

from __future__ import annotations

import json

import pytest

from jobs.engine.keyed import as_of, too_far_ahead
from jobs.engine.views import ViewCounts, merge, order_key, redis_ops, scaled
from jobs.pipelines.spec import PipelineSpec

pytestmark = pytest.mark.unit
BASE = {"name": "t", "source": {"topic": "t.in"},
        "outputs": {"analyzed": {"topic": "t.out"}, "dlq": {"topic": "t.dlq"}},
        "streaming": {"query_name": "t", "redis_prefix": "p"}}
VIEWS = PipelineSpec.model_validate({**BASE, "views": {
    "all": {"kind": "counter", "key": "tags"},
    "minute": {"kind": "tumbling", "key": "colour", "window_s": 60, "where": "flag"},
    "money": {"kind": "entity", "key": "cur", "fields": {"sum": {"sum": "amount", "scale": 2},
                                                         "n": {"count": True}, "top": {"max": "amount"}}},
    "last": {"kind": "latest", "key": "id", "fields": ["colour"]},
}}).views


def _record(i: int, **extra) -> dict:
    return {"id": "a", "tags": ["x", "y"], "colour": "red", "flag": True, "cur": "EUR", "amount": 0.1,
            "event_time_ms": 60_000 + i, **extra}


def test_two_tasks_merge_to_what_one_task_counts() -> None:
    records = [_record(i, colour=c) for i, c in enumerate(["red", "blue", "red", "green"])]
    one, first, second = (ViewCounts(VIEWS, "event_time_ms") for _ in range(3))
    for offset, record in enumerate(records):
        one.add(record, late=False, partition=0, offset=offset)
        (first if offset < 2 else second).add(record, late=False, partition=0, offset=offset)
    ops_one = redis_ops(merge(one.rows()), VIEWS, "p")
    assert ops_one == redis_ops(merge(first.rows() + second.rows()), VIEWS, "p")
    assert ["ZINCRBY", "p:all:all", "4", "x"] in ops_one
    assert ["HINCRBY", "p:minute:60000", "red", "2"] in ops_one
    assert ["HINCRBY", "p:money:EUR", "sum", "40"] in ops_one   # 4 x 0.10 in cents: no float drift
    latest = [op for op in ops_one if op[0] == "EVAL" and op[3] == "p:last:a"]
    assert latest[0][4] == order_key(60_003, 0, 3)
    assert json.loads(latest[0][-1]) == "green"


def test_late_records_leave_windows_out_but_count_all_time() -> None:
    counts = ViewCounts(VIEWS, "event_time_ms")
    counts.add(_record(0), late=True, partition=0, offset=0)
    ops = redis_ops(merge(counts.rows()), VIEWS, "p")
    assert not [op for op in ops if op[1].startswith("p:minute:6")]
    assert ["ZINCRBY", "p:all:all", "1", "x"] in ops


def test_scaled_sums_are_exact() -> None:
    assert sum(scaled(0.1, 2) for _ in range(10)) == 100
    assert scaled(7, 0) == 7


def test_state_as_of_the_fence() -> None:
    entry = json.dumps({"at": 10, "s": "after", "from": {"at": 4, "s": "before"}})
    assert as_of(entry, 11) == ("after", 10)     # the batch that wrote it is below the fence
    assert as_of(entry, 8) == ("before", 4)      # written by a batch the fence has not passed
    assert as_of(json.dumps({"at": 10, "s": "x", "from": None}), 8) is None
    assert as_of(None, 8) is None


def test_reserved_view_names_are_refused() -> None:
    with pytest.raises(ValueError, match="the engine writes these keys itself"):
        PipelineSpec.model_validate({**BASE, "views": {"state": {"kind": "counter", "key": "id"}}})


def test_an_event_time_too_far_ahead_of_kafka_is_a_dead_letter() -> None:
    spec = PipelineSpec.model_validate({**BASE, "event_time": {"future_skew_s": 300}})
    assert too_far_ahead({"event_time_ms": 1_000_000 + 300_001}, spec, 1_000_000)
    assert not too_far_ahead({"event_time_ms": 1_000_000 + 300_000}, spec, 1_000_000)
    assert not too_far_ahead({"event_time_ms": 5}, spec, None)      # no Kafka timestamp: nothing to compare
