"""One micro-batch of ``kappa stream``: the ``foreachBatch`` function (docs/streaming.md).

Order of effects, chosen so that a crash at any point loses nothing and counts nothing twice:
Kafka outputs (at least once, keyed, flushed by the tasks), then the batch's Redis effects
(exactly once: the fenced apply, then the summaries read back from Redis and the metrics), then
the stream times the batch reached (jobs/streaming/stream_time.py); Spark commits the batch only
after this function returns. With
``streaming.apply_in_background`` the Redis effects are written durably to a pending file
instead and applied while the next batch runs (jobs/streaming/applier.py).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
import pyarrow as pa
from confluent_kafka import Producer
from pyspark.sql import DataFrame

from jobs.config.load import KappaConfig
from jobs.errors import KappaError
from jobs.kafka.client import producer_config
from jobs.lake.statefs import Location
from jobs.streaming.applier import BackgroundApply, BackgroundApplyFailed, BatchEffects, EffectsWriter
from jobs.streaming.batch_metrics import Lag, Totals, batch_metrics
from jobs.streaming.codec import stream_codec
from jobs.streaming.gaps import check_batch_start
from jobs.streaming.lease import QueryLease
from jobs.streaming.preflight import watermarks
from jobs.streaming.redis_script import Partition, RedisViewLost
from jobs.streaming.redis_sink import RedisSummarySink
from jobs.streaming.run_spec import KAFKA
from jobs.streaming.state import BatchWatermark, PendingApplyFile
from jobs.streaming.stream_time import StreamTimeLog, later, merge_points
from jobs.streaming.task import TASK_SCHEMA, PhaseClock, TaskPlan, batch_task
from jobs.streaming.task_output import split_output, task_timings

logger = logging.getLogger(__name__)

_encode = msgspec.json.Encoder().encode
POLL_EVERY = 1000
"""Records produced between two polls of the driver's producer (which serve its failed deliveries)."""


class StreamOutputError(KappaError):
    """The driver's summaries or metrics could not be delivered to Kafka."""


class BatchProcessor:
    """The ``foreachBatch`` function of one query; holds the driver's clients."""

    def __init__(self, cfg: KappaConfig, query: str, sinks: frozenset[str], checkpoint: Location,
                 redis_sink: RedisSummarySink | None) -> None:
        self.cfg, self.query, self.sinks = cfg, query, sinks
        self.stream_log, self.redis = StreamTimeLog(checkpoint), redis_sink
        self.grace_ms = cfg.streaming.watermark_s * 1000
        self.codec = stream_codec()
        self.rules, self.windows = self.codec.rules(cfg), self.codec.windows(cfg)
        self.producer = Producer(producer_config(cfg.kafka.client_config()))
        self._produced = 0
        self.lag = Lag(cfg.kafka.client_config())
        self.totals = Totals()
        self.source: dict[str, str] | None = None
        """The Kafka read's options when the query's source emits offset ranges (set by the job)."""
        self.pending = PendingApplyFile(checkpoint)
        self.writer = self._writer() if redis_sink is not None else None
        self.background = (BackgroundApply(self.writer, self.pending, on_error=self._publish_error,
                                           on_written=self._applied)
                           if self.writer is not None and cfg.streaming.apply_in_background else None)
        self._fence: dict[Partition, int] | None = None
        """Background apply: the fence after the last batch handed over (None: read it from Redis)."""
        self._fence_seen = False
        """Redis has held the fence's offsets in this run: a fence gone since is a lost view."""
        self.failure: BaseException | None = None
        """What the last failed batch raised (Spark passes on only its traceback's text)."""
        self._fence_points: dict[Partition, dict[int, int | None]] | None = None
        """Stream times the Redis fence recorded (read once per start)."""
        self.lease: QueryLease | None = None
        """The driver's lease (set by the job): checked before every batch applies anything."""

    def _writer(self) -> EffectsWriter:
        assert self.redis is not None
        s = self.cfg.streaming
        return EffectsWriter(self.redis, query=self.query, top_n=s.top_n, summaries_topic=s.summaries_topic,
                             windows_ms=self.windows.sizes_ms(),
                             produce=self._produce, publish_metrics=self._publish_metrics,
                             flush=lambda: self._flush(30))

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Process one micro-batch; report an exception to platform.errors, then re-raise."""
        try:
            self._process(df, batch_id)
        except Exception as exc:
            self.failure = exc
            if not isinstance(exc, BackgroundApplyFailed):  # that one reported itself
                self._publish_error(batch_id, exc)
            raise

    def recover(self, progress: Callable[[str], None]) -> None:
        """Before a query (re)starts: finish the batch in flight, apply a pending file's effects.

        A stop or crash after a batch was handed to the background apply leaves its effects in the
        pending file; they are applied here, fenced, before any new batch (applier.py).
        """
        self._fence = None
        if self.background is not None:
            self.background.wait()
        data = self.pending.read()
        if data is None or self.writer is None:
            return
        effects = BatchEffects.from_json(data)
        outcome = self.writer.recover(effects)
        self.pending.clear(effects.batch_id)
        progress(f"pending Redis effects of batch {effects.batch_id} (left by a stop or crash): {outcome}")

    def check(self) -> None:
        """Raise a failed background apply or a lost lease (a live query without batches would not notice)."""
        if self.background is not None:
            self.background.check()
        if self.lease is not None and self.lease.lost is not None:
            self.lease.check()

    def _process(self, df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        if self.lease is not None:
            self.lease.check(batch_id)   # another driver took the query over: apply nothing
        clock = PhaseClock()
        fence = self._fence_for_batch(batch_id)
        points = merge_points(self._redis_points(), self.stream_log.points())
        # One pass: every task validates its records, produces the Kafka outputs and counts;
        # only the counts come back (jobs/streaming/task.py).
        clock.lap("fence")
        output = df.mapInArrow(batch_task(self._plan(points, fence)), TASK_SCHEMA).toArrow()
        clock.lap("read_process_produce")
        stats, increments = split_output(output)
        tasks = task_timings(output)
        clock.lap("merge")
        if self.background is not None:
            self.background.wait()  # the previous batch's effects (applied while the tasks ran)
            clock.lap("wait_apply")
        written: dict[str, int] = {}
        if KAFKA in self.sinks:
            written |= {"analyzed": sum(st["valid_rows"] for st in stats),
                        "dlq": sum(st["dlq_rows"] for st in stats)}
        ends = stream_ends(stats)
        used = batch_watermark(ends, points, self.grace_ms)
        max_after = used.max_event_ms
        metrics = batch_metrics(self.query, batch_id, stats, used, max_after=max_after,
                                elapsed_s=time.monotonic() - started, counted=self.redis is not None,
                                behind=self.lag.advance(stats), emitted_ms=int(time.time() * 1000))
        clock.lap("metrics")
        metrics["phases_ms"] = clock.laps
        metrics["tasks"] = tasks
        if self.writer is None:
            self._publish_metrics(metrics)
        else:
            effects = self._effects(batch_id, increments, fence, stats, metrics, ends=ends)
            if self.background is not None:
                self._fence = {**fence, **effects.new_fence}
                self.background.submit(effects)
            else:
                written["summaries"] = self.writer.write(effects)
                self._fence_seen = self._fence_seen or bool(effects.new_fence)
        self.stream_log.record(ends)
        self.totals.add(metrics, written)
        logger.info("batch query=%s batch_id=%d rows=%d valid=%d dlq=%d late=%d applied=%d elapsed_s=%.2f",
                    self.query, batch_id, metrics["input_rows"], metrics["valid_rows"],
                    metrics["dlq_rows"], metrics["late_rows"], metrics["applied_rows"],
                    metrics["batch_duration_ms"] / 1000)

    def _fence_for_batch(self, batch_id: int) -> dict[Partition, int]:
        if self.redis is None:
            return {}
        if self._fence is None or self.background is None:
            fresh = self.redis.fence()
            if self._fence_seen and not fresh:
                raise RedisViewLost.of_batch(self.redis.keys.fence, batch_id)
            self._fence, self._fence_seen = fresh, self._fence_seen or bool(fresh)
        return dict(self._fence)

    def _redis_points(self) -> dict[Partition, dict[int, int | None]]:
        if self.redis is None:
            return {}
        if self._fence_points is None:
            self._fence_points = self.redis.stream_points()
        return self._fence_points

    def _effects(self, batch_id: int, increments: pa.Table, fence: dict[Partition, int],
                 stats: list[dict[str, Any]], metrics: dict[str, Any], *,
                 ends: dict[Partition, tuple[int, int | None]]) -> BatchEffects:
        new_fence = {(st["topic"], st["partition"]): st["max_offset"] + 1 for st in stats
                     if st["applicable"]}
        first = {(st["topic"], st["partition"]): st["min_offset"] for st in stats if st["applicable"]}
        unfenced = sorted(tp for tp in first if tp not in fence)
        earliest = {tp: low for tp, (low, _) in watermarks(self.cfg, unfenced).items()} if unfenced else {}
        # a first apply to a partition starts at its log's start; later ones continue Spark's
        # offsets (a fenced partition can skip offsets legitimately: retention under --skip-lost,
        # transaction markers), and a new run's start is checked against the fence before it starts
        check_batch_start(batch_id, {}, {tp: first[tp] for tp in unfenced}, earliest)
        totals = {name: sum(st[f"{name}_rows"] for st in stats if st["applicable"])
                  for name in ("input", "valid", "dlq", "late")}
        return BatchEffects(batch_id=batch_id, increments=increments, expected=fence,
                            new_fence=new_fence, totals=totals, metrics=metrics,
                            stream_ms={tp: ends[tp][1] for tp in new_fence if tp in ends})

    def _applied(self, written: int) -> None:
        """A batch handed to the background apply is in Redis (called by its thread)."""
        self.totals.summaries_written += written  # the background thread is the only writer
        self._fence_seen = self._fence_seen or bool(self._fence)   # the last batch handed over

    def _plan(self, points: Mapping[Partition, Mapping[int, int | None]],
              fence: Mapping[Partition, int]) -> TaskPlan:
        s, produces = self.cfg.streaming, KAFKA in self.sinks
        return TaskPlan(codec=self.codec, rules=self.rules, windows=self.windows, grace_ms=self.grace_ms,
                        stream_points={tp: dict(offsets) for tp, offsets in points.items()},
                        fence=dict(fence), analyzed_topic=s.analyzed_topic if produces else None,
                        dlq_topic=s.dlq_topic if produces else None,
                        kafka=self.cfg.kafka.client_config(), count=self.redis is not None,
                        source=self.source, redis_prefix=s.redis_prefix,
                        redis=tuple(sorted(self.cfg.redis.client_kwargs().items()))
                        if self.redis is not None else None, fenced=self._fence_seen)

    def _publish_metrics(self, metrics: dict[str, Any]) -> None:
        self._produce(self.cfg.streaming.metrics_topic, self.query, metrics)
        self._flush(30)
        if self.redis is not None:
            self.redis.record_metrics(self.query, metrics)

    def _publish_error(self, batch_id: int, exc: BaseException) -> None:
        record = {"schema_version": 1, "kind": "streaming_error", "query": self.query,
                  "batch_id": batch_id, "error": f"{type(exc).__name__}: {exc}"[:2000],
                  "traceback": traceback.format_exc()[-20000:], "emitted_ms": int(time.time() * 1000)}
        try:
            self._produce(self.cfg.streaming.errors_topic, self.query, record)
            self.producer.flush(10)
        except Exception:  # the original error matters more than a failed report of it
            logger.exception("could not publish the error of batch %d to %s", batch_id,
                             self.cfg.streaming.errors_topic)

    def _produce(self, topic: str, key: str, value: Mapping[str, Any]) -> None:
        self.producer.produce(topic, key=key.encode(), value=_encode(value))
        self._produced += 1
        if not self._produced % POLL_EVERY:  # only failed deliveries are reported
            self.producer.poll(0)

    def _flush(self, timeout_s: float) -> None:
        remaining = self.producer.flush(timeout_s)
        if remaining:
            raise StreamOutputError(f"{remaining} summary/metrics record(s) not delivered to Kafka in "
                                 f"{timeout_s:.0f} s; check the brokers (docs/runbooks/streaming-down.md)")

    def drain(self) -> None:
        """Wait until the last batch's Redis effects are applied (raise if that failed)."""
        if self.background is not None:
            self.background.wait()

    def close(self) -> None:
        """Finish the batch in flight, flush and release the driver's clients."""
        if self.background is not None:
            self.background.close()
        self.producer.flush(30)
        self.lag.close()


def stream_ends(stats: list[dict[str, Any]]) -> dict[Partition, tuple[int, int | None]]:
    """Each partition's next offset after the batch and its stream time there (the tasks' stats)."""
    ends: dict[Partition, tuple[int, int | None]] = {}
    for st in stats:
        tp = (st["topic"], st["partition"])
        offset, stream_ms = ends.get(tp, (0, None))
        ends[tp] = (max(offset, st["max_offset"] + 1), later(stream_ms, st.get("stream_ms")))
    return ends


def batch_watermark(ends: Mapping[Partition, tuple[int, int | None]],
                    points: Mapping[Partition, Mapping[int, int | None]], grace_ms: int) -> BatchWatermark:
    """The metrics' watermark: the lowest stream time of the partitions minus the grace.

    A new record of any partition with an event time below it is late; ``max_event_ms`` is the
    highest stream time. Partitions the batch did not read count with their last known point.
    """
    times = {tp: stream_ms for tp, (_, stream_ms) in ends.items()}
    for tp, offsets in points.items():
        if tp not in times and offsets:
            times[tp] = offsets[max(offsets)]
    known = [t for t in times.values() if t is not None]
    if not known:
        return BatchWatermark(None, None)
    return BatchWatermark(min(known) - grace_ms, max(known))
