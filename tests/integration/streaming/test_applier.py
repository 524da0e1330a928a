"""A batch's Redis effects applied in the background and recovered from the pending file, against
the session's real Redis (one prefix per test). The crash between Spark's commit and the apply,
with Spark, is in test_kill_restart.py."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from jobs.streaming.applier import BackgroundApply, BackgroundApplyFailed, BatchEffects, EffectsWriter
from jobs.streaming.redis_script import RedisViewLost, SummarySinkError
from jobs.streaming.redis_sink import RedisSummarySink
from jobs.streaming.state import PendingApplyFile
from tests.integration.streaming.test_redis_sink import RAW0, RAW1, T0, WINDOWS_MS, inc

BATCH = [inc("city", T0, "Barcelona", 2), inc("topic", 0, "Salsa", 5),
         inc("event", 0, "e1", n=3, no=1, guests=4, label="Mixer")]
TOTALS = {"input": 9, "valid": 7, "dlq": 2, "late": 1}


class Published:
    """What the writer handed to Kafka and to the metrics (collected, in order)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, dict[str, Any]]] = []
        self.metrics: list[dict[str, Any]] = []
        self.flushes = 0

    def produce(self, topic: str, key: str, value: Any) -> None:
        self.records.append((topic, key, dict(value)))

    def flush(self) -> None:
        self.flushes += 1


def writer(sink: RedisSummarySink, out: Published) -> EffectsWriter:
    return EffectsWriter(sink, query="q-test", windows_ms=WINDOWS_MS, top_n=3, summaries_topic="sums",
                         produce=out.produce, publish_metrics=out.metrics.append, flush=out.flush)


def effects(batch_id: int, expected: dict, new_fence: dict, increments=BATCH) -> BatchEffects:
    return BatchEffects(batch_id=batch_id, increments=list(increments), expected=dict(expected),
                        new_fence=dict(new_fence), totals=dict(TOTALS),
                        metrics={"kind": "streaming_batch", "batch_id": batch_id, "input_rows": 9})


def test_effects_survive_the_pending_file(tmp_path: Path) -> None:
    pending = PendingApplyFile(tmp_path / "q")
    original = effects(7, {RAW0: 10}, {RAW0: 15, RAW1: 3})
    pending.write(original.as_json())
    assert BatchEffects.from_json(pending.read() or {}) == original
    pending.clear(6)  # another batch's id: the file stays
    assert pending.read() is not None
    pending.clear(7)
    assert pending.read() is None
    with pytest.raises(SummarySinkError, match=r"format 'other/9'.*start the job version that wrote it"):
        BatchEffects.from_json({"format": "other/9"})


def test_a_pending_file_of_rows_is_still_read() -> None:
    """A pending file written with one object per increment row (kappa-pending-apply/1)."""
    original = effects(7, {RAW0: 10}, {RAW0: 15, RAW1: 3})
    rows = original.as_json() | {"format": "kappa-pending-apply/1", "increments": list(BATCH)}
    assert BatchEffects.from_json(rows) == original
    assert original.as_json()["increments"]["item"] == [row["item"] for row in BATCH]


def test_write_applies_fenced_then_publishes_summaries_and_metrics(sink: RedisSummarySink) -> None:
    out = Published()
    assert writer(sink, out).write(effects(4, {}, {RAW0: 10})) == 3
    assert sink.fence() == {RAW0: 10}
    assert sink.client.hget(sink.keys("cities", T0), "Barcelona") == "2"
    assert {key for _, key, _ in out.records} == {f"city_window/{T0}/Barcelona", "event/e1", "top_topics"}
    assert all(topic == "sums" and value["batch_id"] == 4 for topic, _, value in out.records)
    assert out.flushes == 1
    [metrics] = out.metrics
    assert metrics["batch_id"] == 4 and metrics["summaries_written"] == 3
    assert set(metrics["apply_ms"]) == {"redis_apply", "summaries"} and metrics["applied_ms"] > 0


def test_recover_applies_a_pending_batch_once(sink: RedisSummarySink) -> None:
    out = Published()
    w = writer(sink, out)
    w.write(effects(3, {}, {RAW0: 10}))
    pending = effects(4, {RAW0: 10}, {RAW0: 20, RAW1: 5})
    assert w.recover(pending) == "applied"
    assert sink.fence() == {RAW0: 20, RAW1: 5}
    assert sink.client.hget(sink.keys("cities", T0), "Barcelona") == "4"
    # a crash after the apply, before the file was removed: found applied, counted once, published
    out.records.clear()
    assert w.recover(pending) == "already applied; summaries published again"
    assert sink.client.hget(sink.keys("cities", T0), "Barcelona") == "4"
    assert sink.client.zscore(sink.keys("topics", "all"), "Salsa") == 10.0
    assert {key: value.get("count") for _, key, value in out.records if key.startswith("city")} == {
        f"city_window/{T0}/Barcelona": 4}
    assert [m["batch_id"] for m in out.metrics] == [3, 4, 4]
    # a rebuild by replay (runbooks/redis-lost.md) took the fence past it: applied, not again
    w.write(effects(9, {RAW0: 20, RAW1: 5}, {RAW0: 25, RAW1: 8}))
    assert w.recover(pending) == "already applied; summaries published again"
    assert sink.client.hget(sink.keys("cities", T0), "Barcelona") == "6"


def test_recover_into_a_redis_that_lost_its_fence_refuses_and_writes_nothing(sink: RedisSummarySink) -> None:
    out = Published()
    with pytest.raises(RedisViewLost, match=r"Redis lost the view's data: the fence .* is gone while batch 4 "
                                            r"expects offsets.*kappa reprocess start.*redis-lost.md"):
        writer(sink, out).recover(effects(4, {RAW0: 10}, {RAW0: 20}))
    assert sink.fence() == {}
    assert not list(sink.client.scan_iter(f"{sink.keys.prefix}:*"))
    assert out.records == [] and out.metrics == []


def test_recover_refuses_a_fence_another_writer_moved(sink: RedisSummarySink) -> None:
    out = Published()
    w = writer(sink, out)
    w.write(effects(3, {}, {RAW0: 12}))
    with pytest.raises(SummarySinkError, match=r"batch 4 expect the fence \{rsvps.raw-0: 10\} or, applied, "
                                                r"\{rsvps.raw-0: 20\}, but Redis holds \{rsvps.raw-0: 12\}"):
        w.recover(effects(4, {RAW0: 10}, {RAW0: 20}))
    assert sink.client.hget(sink.keys("cities", T0), "Barcelona") == "2"


def test_background_apply_writes_the_pending_file_first_and_removes_it_after(
        sink: RedisSummarySink, tmp_path: Path) -> None:
    out, pending = Published(), PendingApplyFile(tmp_path / "q")
    seen_during_apply: list[int | None] = []
    release = threading.Event()
    w = writer(sink, out)
    original_write = w.write

    def held_write(batch: BatchEffects, **kwargs: Any) -> int:
        data = pending.read()
        seen_during_apply.append(data["batch_id"] if data else None)
        release.wait(30)
        return original_write(batch)

    w.write = held_write  # type: ignore[method-assign]
    written: list[int] = []
    background = BackgroundApply(w, pending, on_error=lambda *_: None, on_written=written.append)
    try:
        background.submit(effects(1, {}, {RAW0: 10}))
        assert json.loads(pending.path.read_text())["batch_id"] == 1
        background.check()  # still running: no error, no wait
        release.set()
        background.submit(effects(2, {RAW0: 10}, {RAW0: 20}))  # waits for batch 1 first
        background.wait()
    finally:
        background.close()
    assert seen_during_apply == [1, 2]
    assert pending.read() is None
    assert written == [3, 3]
    assert sink.fence() == {RAW0: 20}
    assert sink.client.hget(sink.keys("cities", T0), "Barcelona") == "4"


def test_a_failed_background_apply_keeps_the_pending_file_and_fails_the_next_wait(
        sink: RedisSummarySink, tmp_path: Path) -> None:
    out, pending = Published(), PendingApplyFile(tmp_path / "q")
    writer(sink, out).write(effects(3, {}, {RAW0: 12}))
    errors: list[tuple[int, str]] = []
    background = BackgroundApply(writer(sink, out), pending,
                                 on_error=lambda batch_id, exc: errors.append((batch_id, str(exc))),
                                 on_written=lambda n: None)
    try:
        background.submit(effects(4, {RAW0: 10}, {RAW0: 20}))  # expects a fence Redis does not hold
        with pytest.raises(BackgroundApplyFailed, match=r"the Redis apply of batch 4 failed: the Redis "
                                                        r"fence moved .* applied at the next start"):
            background.wait()
    finally:
        background.close()
    assert [batch_id for batch_id, _ in errors] == [4]
    assert BatchEffects.from_json(pending.read() or {}).batch_id == 4
    assert sink.fence() == {RAW0: 12}
