"""A micro-batch's Redis effects, and applying them in the background while the next batch runs.

:class:`BatchEffects` is what one batch changes in Redis and publishes: the summed increments,
the fence it expects and the fence it moves to, its totals and its metrics. :class:`EffectsWriter`
applies them (the fenced script of jobs/streaming/redis_script.py, which also reads the changed
summaries back), publishes them to the summaries topic and the metrics to ``platform.metrics`` and Redis.

With ``streaming.apply_in_background`` (the default) the driver does not wait for that before the
next batch (docs/streaming.md, "The fence"). For batch N:

1. batch N's tasks run; meanwhile :class:`BackgroundApply` applies batch N-1, publishes it and
   removes its pending file;
2. the driver waits for that (its error fails batch N), writes N's effects durably to the pending
   file (``<checkpoint>/kappa-state/pending-apply.json``), records N's watermark and hands N over;
3. ``foreachBatch`` returns and Spark commits N.

Batch N+1's tasks decide which records count against the fence N moves to, known in memory. A
crash at any point leaves at most one pending file, which the next start applies before the
query starts (:meth:`EffectsWriter.recover`), through the same fenced script, so nothing is lost
and nothing counts twice. The time a batch's Redis effects are later is that of the next
batch's tasks, never more than one batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from jobs.errors import KappaError
from jobs.streaming.aggregates import increment_arrow_schema, increments_table
from jobs.streaming.redis_script import Partition, RedisViewLost, SummarySinkError
from jobs.streaming.redis_sink import RedisSummarySink
from jobs.streaming.state import PendingApplyFile

logger = logging.getLogger(__name__)

PENDING_FORMAT = "kappa-pending-apply/2"
"""The pending file's format: increments as columns (``/1``, still read: one object per row)."""
PENDING_ROWS_FORMAT = "kappa-pending-apply/1"


class BackgroundApplyFailed(KappaError):
    """The background apply of a batch failed; the batch's effects stay in the pending file."""

    published = True
    """Already reported to ``platform.errors`` by the background thread, with its own batch id."""


@dataclass
class BatchEffects:
    """What one batch changes in Redis and publishes."""

    batch_id: int
    increments: pa.Table
    """The summed increment rows (:func:`~jobs.streaming.aggregates.increments_table`; dicts are
    taken too)."""
    expected: dict[Partition, int]
    """The fence the batch's tasks counted against (absent partition: nothing applied yet)."""
    new_fence: dict[Partition, int]
    totals: dict[str, int]
    metrics: dict[str, Any]
    stream_ms: dict[Partition, int | None] = field(default_factory=dict)
    """The stream time at each partition's new fence (jobs/streaming/stream_time.py)."""

    def __post_init__(self) -> None:
        self.increments = increments_table(self.increments)

    def as_json(self) -> dict[str, Any]:
        """The pending file's content."""
        return {"format": PENDING_FORMAT, "batch_id": self.batch_id,
                "increments": self.increments.to_pydict(),
                "expected": _pairs(self.expected), "new_fence": _pairs(self.new_fence),
                "totals": self.totals, "metrics": self.metrics,
                "stream_ms": [[t, p, s] for (t, p), s in sorted(self.stream_ms.items())]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchEffects:
        """Read a pending file's content back (refusing a format this code does not know)."""
        if data.get("format") not in {PENDING_FORMAT, PENDING_ROWS_FORMAT}:
            raise SummarySinkError(f"the pending Redis apply has format {data.get('format')!r}, this "
                                   f"job reads {PENDING_FORMAT!r}: start the job version that wrote it")
        rows = data["increments"]
        increments = (pa.Table.from_pydict(rows, schema=increment_arrow_schema()) if isinstance(rows, dict)
                      else increments_table(rows))
        return cls(batch_id=int(data["batch_id"]), increments=increments,
                   expected={(t, int(p)): int(o) for t, p, o in data["expected"]},
                   new_fence={(t, int(p)): int(o) for t, p, o in data["new_fence"]},
                   totals=dict(data["totals"]), metrics=dict(data["metrics"]),
                   stream_ms={(t, int(p)): s for t, p, s in data.get("stream_ms", [])})


class EffectsWriter:
    """Apply a batch's effects to Redis, then publish its summaries and metrics."""

    def __init__(self, sink: RedisSummarySink, *, query: str, windows_ms: Mapping[str, int], top_n: int,
                 summaries_topic: str, produce: Callable[[str, str, Mapping[str, Any]], None],
                 publish_metrics: Callable[[dict[str, Any]], None], flush: Callable[[], None]) -> None:
        self.sink, self.query, self.windows_ms, self.top_n = sink, query, dict(windows_ms), top_n
        self.summaries_topic = summaries_topic
        self._produce, self._publish_metrics, self._flush = produce, publish_metrics, flush

    def write(self, effects: BatchEffects, *, expected: Mapping[Partition, int] | None = None,
              applied_before: bool = False) -> int:
        """Apply the effects fenced on ``expected`` (default: the batch's own), then publish them.

        ``applied_before``: Redis already holds them (a recovery); only publish. Returns how many
        summary records went to the summaries topic.
        """
        began = time.monotonic()
        meta = {"batch_id": effects.batch_id, "query": self.query, "totals": effects.totals,
                "stream_ms": effects.stream_ms}
        if applied_before:
            changed = self.sink.changed(effects.increments)
            summaries = self.sink.read_back(changed, self.windows_ms, self.top_n)
        else:
            summaries = self.sink.apply_and_read(
                effects.increments, effects.expected if expected is None else expected, effects.new_fence,
                meta, windows_ms=self.windows_ms, top_n=self.top_n)
        applied_at = time.monotonic()
        common = {"schema_version": 1, "query": self.query, "batch_id": effects.batch_id,
                  "emitted_ms": int(time.time() * 1000)}
        produce, topic = self._produce, self.summaries_topic
        for record in summaries:
            record.update(common)
            produce(topic, record["key"], record)
        self._flush()
        done = time.monotonic()
        self._publish_metrics(effects.metrics | {
            "applied_ms": int(time.time() * 1000), "summaries_written": len(summaries),
            "apply_ms": {"redis_apply": int((applied_at - began) * 1000),
                         "summaries": int((done - applied_at) * 1000)}})
        return len(summaries)

    def recover(self, effects: BatchEffects) -> str:
        """Apply a pending file's effects left by a stop or crash; say what was found."""
        fence = self.sink.fence()
        partitions = list(effects.new_fence)
        if not fence and effects.expected:   # it counted against a fence that is gone
            raise RedisViewLost.of_batch(self.sink.keys.fence, effects.batch_id)
        if all(fence.get(tp, -1) >= effects.new_fence[tp] for tp in partitions):
            # applied, or a rebuild by replay (docs/runbooks/redis-lost.md) went past them
            self.write(effects, applied_before=True)
            return "already applied; summaries published again"
        if all(fence.get(tp) == effects.expected.get(tp) for tp in partitions):
            self.write(effects)
            return "applied"
        raise SummarySinkError(
            f"the pending Redis effects of batch {effects.batch_id} expect the fence "
            f"{_fmt(effects.expected, partitions)} or, applied, {_fmt(effects.new_fence, partitions)}, "
            f"but Redis holds {_fmt(fence, partitions)}: another query writes the same summaries. "
            "Stop it, then rebuild the summaries by replay (docs/runbooks/redis-lost.md)")


class BackgroundApply:
    """One thread that writes batches' effects in order; at most one batch in flight."""

    def __init__(self, writer: EffectsWriter, pending: PendingApplyFile,
                 on_error: Callable[[int, BaseException], None],
                 on_written: Callable[[int], None]) -> None:
        self.writer, self.pending = writer, pending
        self._on_error, self._on_written = on_error, on_written
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kappa-apply")
        self._future: Future[None] | None = None

    def submit(self, effects: BatchEffects) -> None:
        """Write ``effects`` durably to the pending file, then apply them in the background."""
        self.wait()
        self.pending.write(effects.as_json())
        self._future = self._executor.submit(self._run, effects)

    def wait(self) -> None:
        """Wait for the batch in flight; raise BackgroundApplyFailed if its apply failed."""
        future, self._future = self._future, None
        if future is not None:
            future.result()

    def check(self) -> None:
        """Raise the in-flight batch's failure if it has failed (never waits)."""
        future = self._future
        if future is not None and future.done() and future.exception() is not None:
            self.wait()

    def close(self) -> None:
        """Let the batch in flight finish (its failure is logged: the pending file stays)."""
        try:
            self.wait()
        except BackgroundApplyFailed as exc:
            logger.error("%s", exc)
        finally:
            self._executor.shutdown(wait=True)

    def _run(self, effects: BatchEffects) -> None:
        try:
            written = self.writer.write(effects)
        except Exception as exc:
            self._on_error(effects.batch_id, exc)
            if isinstance(exc, RedisViewLost):   # nothing to apply at a next start: the view is gone
                raise BackgroundApplyFailed(str(exc)) from exc
            raise BackgroundApplyFailed(
                f"the Redis apply of batch {effects.batch_id} failed: {exc}; its effects stay in "
                f"{self.pending.path} and are applied at the next start") from exc
        self.pending.clear(effects.batch_id)
        self._on_written(written)


def _pairs(fence: Mapping[Partition, int]) -> list[list[Any]]:
    return [[topic, partition, offset] for (topic, partition), offset in sorted(fence.items())]


def _fmt(fence: Mapping[Partition, int], partitions: list[Partition]) -> str:
    return "{" + ", ".join(f"{t}-{p}: {fence.get((t, p))}" for t, p in partitions) + "}"
