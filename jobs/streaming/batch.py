"""One micro-batch of the RSVP job: the ``foreachBatch`` function (docs/streaming.md).

Order of effects, chosen so that a crash at any point loses nothing and counts nothing twice:
Kafka outputs (at least once, keyed), then the fenced Redis apply (exactly once), then the
summaries read back from Redis, then metrics, then the batch's watermark record; Spark commits
the batch only after this function returns.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql import DataFrame

from jobs.common.config import KappaConfig
from jobs.common.kafka.client import consumer_config, producer_config
from jobs.streaming.aggregates import Windows
from jobs.streaming.redis_script import Partition
from jobs.streaming.redis_sink import RedisSummarySink
from jobs.streaming.state import BatchWatermark, WatermarkLog
from jobs.streaming.task import TASK_SCHEMA, PhaseClock, TaskPlan, batch_task, split_output, task_timings
from jobs.streaming.validate import Rules

logger = logging.getLogger(__name__)

METRICS_SCHEMA_VERSION = 1
_encode = msgspec.json.Encoder().encode
KAFKA, REDIS = "kafka", "redis"


@dataclass
class Totals:
    """Counts over every batch a run processed (the replay report)."""

    batches: int = 0
    input_rows: int = 0
    valid_rows: int = 0
    dlq_rows: int = 0
    late_rows: int = 0
    applied_rows: int = 0
    analyzed_written: int = 0
    dlq_written: int = 0
    summaries_written: int = 0
    last_batch: dict[str, Any] = field(default_factory=dict)

    def add(self, metrics: Mapping[str, Any], written: Mapping[str, int]) -> None:
        """Fold one batch's metrics in."""
        self.batches += 1
        for name in ("input_rows", "valid_rows", "dlq_rows", "late_rows", "applied_rows"):
            setattr(self, name, getattr(self, name) + int(metrics[name]))
        self.analyzed_written += written.get("analyzed", 0)
        self.dlq_written += written.get("dlq", 0)
        self.summaries_written += written.get("summaries", 0)
        self.last_batch = dict(metrics)


def rules_from(cfg: KappaConfig) -> Rules:
    """The validation rules of the config."""
    return Rules(min_event_ms=cfg.streaming.min_event_ms,
                   future_skew_ms=cfg.streaming.future_skew_s * 1000,
                   max_record_bytes=cfg.collector.max_record_bytes)


def windows_from(cfg: KappaConfig) -> Windows:
    """The window sizes of the config."""
    s = cfg.streaming
    return Windows(city_ms=s.city_window_s * 1000, trending_ms=s.trending_window_s * 1000,
                   trending_slide_ms=s.trending_slide_s * 1000, members_ms=s.members_window_s * 1000)


class BatchProcessor:
    """The ``foreachBatch`` function of one query; holds the driver's clients."""

    def __init__(self, cfg: KappaConfig, query: str, sinks: frozenset[str], watermarks: WatermarkLog,
                 redis_sink: RedisSummarySink | None) -> None:
        self.cfg, self.query, self.sinks = cfg, query, sinks
        self.watermarks, self.redis = watermarks, redis_sink
        self.rules, self.windows = rules_from(cfg), windows_from(cfg)
        self.producer = Producer(producer_config(cfg.kafka.client_config()))
        self._latest: Consumer | None = None
        self.positions: dict[Partition, int] = {}
        self.totals = Totals()
        self.source: dict[str, str] | None = None
        """The Kafka read's options when the query's source emits offset ranges (set by the job)."""

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Process one micro-batch; report an exception to platform.errors, then re-raise."""
        try:
            self._process(df, batch_id)
        except Exception as exc:
            self._publish_error(batch_id, exc)
            raise

    def _process(self, df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        clock = PhaseClock()
        used = self.watermarks.for_batch(batch_id)
        fence = self.redis.fence() if self.redis else {}
        # One pass: every task validates its records, produces the Kafka outputs and counts;
        # only the counts come back (jobs/streaming/task.py).
        clock.lap("fence")
        output = df.mapInArrow(batch_task(self._plan(used, fence)), TASK_SCHEMA).toArrow()
        clock.lap("read_process_produce")
        stats, increments = split_output(output)
        tasks = task_timings(output)
        clock.lap("merge")
        written: dict[str, int] = {}
        if KAFKA in self.sinks:
            written |= {"analyzed": sum(st["valid_rows"] for st in stats),
                        "dlq": sum(st["dlq_rows"] for st in stats)}
        if self.redis is not None:
            written["summaries"] = self._apply_redis(increments, fence, stats=stats,
                                                   batch_id=batch_id, clock=clock)
        batch_max = max((s["max_event_ms"] for s in stats if s["max_event_ms"] is not None), default=None)
        max_after = max((v for v in (used.max_event_ms, batch_max) if v is not None), default=None)
        metrics = self._metrics(batch_id, stats, used, max_after, time.monotonic() - started)
        clock.lap("metrics")
        metrics["phases_ms"] = clock.laps
        metrics["tasks"] = tasks
        self._publish_metrics(metrics)
        self.watermarks.record(batch_id, used, max_after)
        self.totals.add(metrics, written)
        logger.info("batch query=%s batch_id=%d rows=%d valid=%d dlq=%d late=%d applied=%d elapsed_s=%.2f",
                    self.query, batch_id, metrics["input_rows"], metrics["valid_rows"],
                    metrics["dlq_rows"], metrics["late_rows"], metrics["applied_rows"],
                    metrics["batch_duration_ms"] / 1000)

    def _plan(self, used: BatchWatermark, fence: Mapping[Partition, int]) -> TaskPlan:
        s, produces = self.cfg.streaming, KAFKA in self.sinks
        return TaskPlan(rules=self.rules, windows=self.windows, watermark_ms=used.watermark_ms,
                        fence=dict(fence), analyzed_topic=s.analyzed_topic if produces else None,
                        dlq_topic=s.dlq_topic if produces else None,
                        kafka=self.cfg.kafka.client_config(), count=self.redis is not None,
                        source=self.source, redis_prefix=s.redis_prefix,
                        redis=tuple(sorted(self.cfg.redis.client_kwargs().items()))
                        if self.redis is not None else None)

    def _apply_redis(self, increments: list[dict[str, Any]], fence: dict[Partition, int], *,
                     stats: list[dict[str, Any]], batch_id: int,
                     clock: PhaseClock) -> int:
        assert self.redis is not None
        s = self.cfg.streaming
        new_fence = {(st["topic"], st["partition"]): st["max_offset"] + 1 for st in stats
                     if st["applicable"]}
        totals = {name: sum(st[f"{name}_rows"] for st in stats if st["applicable"])
                  for name in ("input", "valid", "dlq", "late")}
        applied = self.redis.apply(increments, fence, new_fence,
                                   {"batch_id": batch_id, "query": self.query, "totals": totals})
        clock.lap("redis_apply")
        summaries = self.redis.read_back(applied, {
            "city": self.windows.city_ms, "trending": self.windows.trending_ms,
            "members": self.windows.members_ms}, s.top_n)
        now = int(time.time() * 1000)
        for record in summaries:
            record |= {"schema_version": 1, "query": self.query, "batch_id": batch_id, "emitted_ms": now}
            self._produce(s.summaries_topic, record["key"], record)
        self.producer.flush(30)
        clock.lap("summaries")
        return len(summaries)

    def _metrics(self, batch_id: int, stats: list[dict[str, Any]], used: BatchWatermark,
                 max_after: int | None, elapsed_s: float) -> dict[str, Any]:
        def total(name: str, only_applicable: bool = False) -> int:
            return sum(st[name] for st in stats if st["applicable"] or not only_applicable)

        start: dict[str, dict[str, int]] = {}
        end: dict[str, dict[str, int]] = {}
        for st in stats:
            tp = (st["topic"], st["partition"])
            first = min(start.get(st["topic"], {}).get(str(st["partition"]), st["min_offset"]),
                        st["min_offset"])
            start.setdefault(st["topic"], {})[str(st["partition"])] = first
            last = max(end.get(st["topic"], {}).get(str(st["partition"]), -1), st["max_offset"] + 1)
            end.setdefault(st["topic"], {})[str(st["partition"])] = last
            self.positions[tp] = max(self.positions.get(tp, 0), last)
        rows = total("input_rows")
        return {
            "schema_version": METRICS_SCHEMA_VERSION, "kind": "streaming_batch", "query": self.query,
            "batch_id": batch_id, "input_rows": rows, "valid_rows": total("valid_rows"),
            "dlq_rows": total("dlq_rows"), "late_rows": total("late_rows"),
            "applied_rows": total("valid_rows", only_applicable=True) if self.redis else 0,
            "rows_per_s": round(rows / elapsed_s, 1) if elapsed_s > 0 else 0.0,
            "batch_duration_ms": int(elapsed_s * 1000), "watermark_ms": used.watermark_ms,
            "max_event_ms": max_after, "start_offsets": start, "end_offsets": end,
            "offsets_behind_latest": self._behind(), "emitted_ms": int(time.time() * 1000),
        }

    def _behind(self) -> int | None:
        if not self.positions:
            return None
        if self._latest is None:
            self._latest = Consumer(consumer_config(self.cfg.kafka.client_config(), "kappa-stream-lag"))
        behind = 0
        for (topic, partition), position in self.positions.items():
            _, high = self._latest.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            behind += max(0, high - position)
        return behind

    def _publish_metrics(self, metrics: dict[str, Any]) -> None:
        self._produce(self.cfg.streaming.metrics_topic, self.query, metrics)
        self.producer.flush(30)
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
        self.producer.poll(0)

    def close(self) -> None:
        """Flush and release the driver's clients."""
        self.producer.flush(30)
        if self._latest is not None:
            self._latest.close()
