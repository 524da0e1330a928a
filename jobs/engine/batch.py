"""One micro-batch of a pipeline on the driver: plan, run the tasks, apply their effects fenced.

Order of effects: the tasks produce the analyzed records and dead letters (flushed before a task
ends), then the driver applies the batch's view counts and keyed-state entries to Redis with the
fence's move in one fenced apply (jobs/streaming/redis_script.py), then Spark commits the batch.
A crash at any point loses nothing and counts nothing twice: a batch run again skips what its
earlier attempt applied (records below the fence, chunks already made).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import redis
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema

from jobs.config.load import KappaConfig
from jobs.engine.keyed import STATE
from jobs.engine.plan import Partition, PipelinePlan
from jobs.engine.task import pipeline_task
from jobs.engine.views import ROW_SCHEMA, merge, redis_ops
from jobs.pipelines.spec import PipelineSpec
from jobs.streaming.fence_fields import parse_fence, parse_stream_points
from jobs.streaming.gaps import check_batch_start
from jobs.streaming.lease import QueryLease
from jobs.streaming.preflight import watermarks
from jobs.streaming.redis_script import ApplyOps, FencedApply, RedisViewLost

logger = logging.getLogger(__name__)
SPARK_ROW_SCHEMA = from_arrow_schema(ROW_SCHEMA)


class PipelineBatches:
    """The ``foreachBatch`` function of one pipeline query."""

    def __init__(self, cfg: KappaConfig, spec: PipelineSpec, folder: str, *, query: str, prefix: str,
                 views: bool, produce: bool, client: redis.Redis, outputs: tuple[str, str]) -> None:
        self.cfg, self.spec, self.folder, self.query = cfg, spec, folder, query
        self.prefix, self.views, self.produce, self.client = prefix, views, produce, client
        self.fence_key, self.outputs = f"{prefix}:fence", outputs
        self.apply = FencedApply(client, self.fence_key, cfg.streaming.apply_chunk_args)
        self.source: dict[str, str] | None = None
        self.totals = {"batches": 0, "input_rows": 0, "valid_rows": 0, "dlq_rows": 0, "late_rows": 0,
                       "skipped_rows": 0}
        self.fence_seen = False
        self.failure: BaseException | None = None
        self.lease: QueryLease | None = None
        """The driver's lease (set by the run): checked before every batch applies anything."""

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Process one micro-batch; keep what it raised (Spark passes on only its text)."""
        try:
            self._process(df, batch_id)
        except Exception as exc:
            self.failure = exc
            raise

    def fence(self) -> dict[Partition, int]:
        """The offsets the views (or the run's state) have applied, per partition."""
        return parse_fence(self.client.hgetall(self.fence_key))

    def _process(self, df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        if self.lease is not None:
            self.lease.check(batch_id)   # another driver took the query over: apply nothing
        raw = self.client.hgetall(self.fence_key)
        fence, points = parse_fence(raw), parse_stream_points(raw)
        if self.fence_seen and not fence:
            raise RedisViewLost.of_batch(self.fence_key, batch_id)
        source = self.spec.source.topic
        unfenced = [(source, p) for p in range(self.spec.source.partitions) if (source, p) not in fence]
        earliest = {tp: low for tp, (low, _) in watermarks(self.cfg, unfenced).items()} if unfenced else {}
        plan = PipelinePlan(
            folder=self.folder, fence=fence,
            stream_ms={tp: offsets.get(fence[tp]) for tp, offsets in points.items() if tp in fence},
            earliest=earliest, kafka=self.cfg.kafka.client_config(),
            redis=tuple(sorted(self.cfg.redis.client_kwargs().items())), prefix=self.prefix,
            produce=self.produce, source=self.source, params=self.spec.params, outputs=self.outputs)
        table = df.mapInArrow(pipeline_task(plan), SPARK_ROW_SCHEMA).toArrow()
        rows = table.cast(ROW_SCHEMA).to_pylist() if table.num_rows else []
        stats = [json.loads(row["text"]) for row in rows if row["kind"] == "stats"]
        read = [st for st in stats if st["max_offset"] is not None]
        new_fence = {(st["topic"], st["partition"]): st["max_offset"] + 1 for st in read}
        if self.views:  # a view never starts past the log's first offset: it would miss records
            first = {(st["topic"], st["partition"]): st["min_offset"] for st in read
                     if (st["topic"], st["partition"]) not in fence}
            check_batch_start(batch_id, {}, first, earliest)
        ops = ApplyOps()
        if self.views:
            ops.ops = redis_ops(merge(rows), self.spec.views, self.prefix)
        ops.ops += [["SET", f"{self.prefix}:{row['rkey']}", row["text"], "EX", str(row["window"])]
                    for row in sorted(rows, key=lambda r: r["rkey"]) if row["kind"] == STATE]
        if new_fence:
            meta = {"batch_id": batch_id, "query": self.query,
                    "stream_ms": {(st["topic"], st["partition"]): st["stream_ms"] for st in read}}
            self.apply.run(ops, fence, new_fence, meta, prefix=self.prefix)
            self.fence_seen = True
        self.totals["batches"] += 1
        for name in ("input_rows", "valid_rows", "dlq_rows", "late_rows", "skipped_rows"):
            self.totals[name] += sum(st[name] for st in stats)
        elapsed_ms = int((time.monotonic() - started) * 1000)
        metrics = {"query": self.query, "batch_id": batch_id, "elapsed_ms": elapsed_ms,
                   **{name: sum(st[name] for st in stats) for name in self.totals if name != "batches"},
                   "emitted_ms": int(time.time() * 1000)}
        self.client.hset(f"{self.prefix}:metrics", self.query, json.dumps(metrics))
        logger.info("batch query=%s batch_id=%d rows=%d valid=%d dlq=%d late=%d elapsed_ms=%d", self.query,
                    batch_id, metrics["input_rows"], metrics["valid_rows"], metrics["dlq_rows"],
                    metrics["late_rows"], metrics["elapsed_ms"])

    def report(self) -> dict[str, Any]:
        """What the run did so far."""
        return dict(self.totals)

