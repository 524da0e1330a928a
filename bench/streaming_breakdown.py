"""Where a micro-batch's CPU goes: the job's Spark pass with parts of it switched off.

Three availableNow queries over the same topic, each a ``foreachBatch`` doing less than the job:
``read`` (the records read, as the job reads them, and counted: with ``streaming.read_in_tasks``
each task reads its offset ranges, else the Kafka source reads them into the JVM),
``process`` (plus the per-task pass of jobs/streaming/task.py without the Kafka outputs) and
``produce`` (plus the outputs: the job's Spark job, without the driver's Redis apply, summaries
and metrics). Reported per mode: batch
wall times and CPU microseconds per event of this process and every descendant (the JVM, its
Python workers, the embedded broker and Redis). Called by ``bench/streaming.py --breakdown``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from jobs.config.load import KappaConfig
from jobs.streaming.task import TASK_SCHEMA, TaskPlan, batch_task
from pipelines.rsvp.records import RECORDS

MODES = ("read", "process", "produce")


def breakdown(cfg: KappaConfig, source: str, records: int, per_trigger: int, folder: str,
              cpu_seconds: Callable[[], float]) -> dict[str, Any]:
    """Run the three modes in order; their wall times and CPU per event."""
    from jobs.spark.kafka_io import read_options
    from jobs.spark.session import build_spark

    spark = build_spark(cfg)
    s, props = cfg.streaming, cfg.kafka.client_config()
    ranges = s.read_in_tasks
    result: dict[str, Any] = {}
    for mode in MODES:
        produces = mode == "produce"
        checkpoint = f"{folder}/breakdown-{mode}-{uuid.uuid4().hex[:6]}"
        fmt, opts = read_options(cfg, topics=[source], starting="earliest", ending="latest", stream=True,
                                 options={"maxOffsetsPerTrigger": per_trigger,
                                          **({"emitRanges": "true"} if ranges else {})},
                                 checkpoint=checkpoint)
        plan = TaskPlan(codec=RECORDS, rules=RECORDS.rules(cfg), windows=RECORDS.windows(cfg),
                        grace_ms=cfg.streaming.watermark_s * 1000, stream_points={}, fence={},
                        analyzed_topic=s.analyzed_topic if produces else None,
                        dlq_topic=s.dlq_topic if produces else None, kafka=props,
                        source=opts if ranges else None)
        times: list[float] = []

        def each(df, batch_id: int, plan: TaskPlan = plan, mode: str = mode,
                 times: list[float] = times) -> None:
            del batch_id
            began = time.monotonic()
            if mode == "read" and ranges:
                df.mapInArrow(count_ranges(plan.source), "rows long").collect()
            elif mode == "read":
                df.count()
            else:
                df.mapInArrow(batch_task(plan), TASK_SCHEMA).toArrow()
            times.append(round(time.monotonic() - began, 2))

        frame = spark.readStream.format(fmt).options(**opts).load()
        before, began = cpu_seconds(), time.monotonic()
        query = (frame.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        cpu = cpu_seconds() - before
        result[mode] = {"batch_s": times, "wall_s": round(time.monotonic() - began, 1),
                        "cpu_us_per_event": round(cpu / records * 1e6, 1)}
    return result


def count_ranges(source: Any) -> Callable[[Any], Any]:
    """A ``mapInArrow`` function: read the input's offset ranges as the job's tasks do, count."""

    def run(batches: Any) -> Any:
        import pyarrow as pa

        from jobs.streaming.task import task_records

        rows = sum(batch.num_rows for batch in task_records(batches, source))
        yield pa.RecordBatch.from_pylist([{"rows": rows}])

    return run
