"""Diagnostic: the streaming job's task function without Spark, against the loop, on one topic.

Where does the job's time go that is not the per-record work? This runs the job's own task
function (``jobs.streaming.task.batch_task``: read the offset ranges, validate, produce the
analyzed records and dead letters, add the members to Redis, count) outside Spark, on the same
topic and embedded broker as the loop of bench/streaming.py, in three ways:

* ``loop``: bench/streaming_loop.py, as in bench/streaming.py;
* ``task``: one process calls the task function on every 100k-record batch, all partitions'
  ranges in one call;
* ``tasks2``: two forked processes each call it on their share, as the job's two tasks do on
  ``local[2]`` (ranges grouped as ``rangeGroups`` groups them).

Per batch it reports wall seconds and the process's CPU seconds. Against bench/streaming.py, the
difference between ``tasks2`` and the job's Spark pass is what Spark adds (JVM, planning, worker
round trips); the difference between ``task`` and ``loop`` is what the task code adds.
Prints one JSON object. Never run as a timed test.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/streaming_tasks.py --records 300000
"""

from __future__ import annotations

import argparse
import cProfile
import json
import multiprocessing as mp
import os
import resource
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench's sibling modules

import streaming as bench
from streaming_cpu import settle, with_cpu
from streaming_support import PARTITIONS, drop_topics, new_topic

from jobs.config.load import KappaConfig
from jobs.kafka.offsets import OffsetRange, group_ranges
from jobs.spark.kafka_io import read_options
from jobs.streaming.task import RANGE_COLUMNS, TaskPlan, batch_task
from jobs.streaming.task_output import task_timings
from pipelines.rsvp.records import RECORDS

RANGES_ARROW = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("startOffset", pa.int64()),
                          ("endOffset", pa.int64()), ("continued", pa.bool_())])

PER_BATCH = 100_000


def main(argv: list[str] | None = None) -> int:
    """Produce, run the modes in order, print the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--modes", default="loop,task,tasks2")
    parser.add_argument("--profile", metavar="PREFIX",
                        help="cProfile every task process; stats to PREFIX-<mode>-<index>.prof")
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    result: dict[str, Any] = {"benchmark": "streaming_tasks", "records": args.records,
                              "per_batch": PER_BATCH, "partitions": PARTITIONS}
    with bench.private_source(args.records, "kappa-bench-tasks-") as (cfg, source):
        props = cfg.kafka.client_config()
        settle()
        for mode in args.modes.split(","):
            outputs = [new_topic(props, PARTITIONS), new_topic(props, 1)]
            run = (partial(bench._loop, cfg, source, args.records, outputs) if mode == "loop"
                   else partial(_tasks, cfg, source, args.records, outputs,
                                processes=2 if mode == "tasks2" else 1,
                                profile=f"{args.profile}-{mode}" if args.profile else None))
            result[mode] = with_cpu(run)
            drop_topics(props, outputs)
    print(json.dumps(result, indent=2))
    return 0


def _tasks(cfg: KappaConfig, source: str, records: int, outputs: list[str], processes: int,
           profile: str | None = None) -> dict[str, Any]:
    """Every batch through the task function, in this process or in forked ones."""
    began = time.monotonic()
    # always in forked processes: a parent holding librdkafka clients (with their threads) from an
    # earlier mode would hand its children clients without threads
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    children = [ctx.Process(target=lambda i=i: queue.put(_profiled(
        partial(_task_process, cfg, source, records, outputs, i, processes),
        f"{profile}-{i}.prof" if profile else None))) for i in range(processes)]
    for child in children:
        child.start()
    runs = [queue.get() for _ in children]
    for child in children:
        child.join()
    seconds = time.monotonic() - began
    return {"records": records, "seconds": round(seconds, 2), "rows_per_s": round(records / seconds),
            "processes": sorted(runs, key=lambda r: r["index"])}


def _task_process(cfg: KappaConfig, source: str, records: int, outputs: list[str], index: int,
                  groups: int) -> dict[str, Any]:
    """Process ``index`` of ``groups``: its share of each batch, batch after batch."""
    _, opts = read_options(cfg, topics=[source], starting="earliest", ending="latest", stream=True,
                           options={"emitRanges": "true"},
                           checkpoint=str(cfg.lake.checkpoint_root) + "/tasks")
    plan = TaskPlan(codec=RECORDS, rules=RECORDS.rules(cfg), windows=RECORDS.windows(cfg),
                    grace_ms=cfg.streaming.watermark_s * 1000, stream_points={}, fence={},
                    analyzed_topic=outputs[0], dlq_topic=outputs[1], kafka=cfg.kafka.client_config(),
                    source=opts, redis_prefix=f"bench-tasks-{os.getpid()}",
                    redis=tuple(sorted(cfg.redis.client_kwargs().items())))
    each, start, batches = records // PARTITIONS, 0, []
    while start < each:
        end = min(each, start + PER_BATCH // PARTITIONS)
        ranges = [OffsetRange(source, p, start, end) for p in range(PARTITIONS)]
        groups_of_batch = group_ranges(ranges, groups)
        mine = groups_of_batch[index].rows() if index < len(groups_of_batch) else []
        rows = pa.RecordBatch.from_pylist([dict(zip(RANGE_COLUMNS, row, strict=True)) for row in mine],
                                          schema=RANGES_ARROW)
        wall, cpu, faults = time.monotonic(), _cpu(), _faults()
        output = list(batch_task(plan)(iter([rows])))
        batches.append({"records": sum(end - start for _, _, start, end, _ in mine),
                        "wall_s": round(time.monotonic() - wall, 2),
                        "cpu_s": round(_cpu() - cpu, 2), "page_faults": _faults() - faults,
                        "output_rows": sum(b.num_rows for b in output),
                        # one task: its phases are the batch metrics' largest per phase
                        "phases_ms": task_timings(pa.Table.from_batches(output))["max_ms"]})
        start = end
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    return {"index": index, "batches": batches, "peak_rss_mb": peak_mb}


def _profiled(run: Callable[[], dict[str, Any]], path: str | None) -> dict[str, Any]:
    """``run()``, under cProfile when ``path`` is given (its stats written there)."""
    if path is None:
        return run()
    profiler = cProfile.Profile()
    try:
        return profiler.runcall(run)
    finally:
        profiler.dump_stats(path)


def _faults() -> int:
    """Minor page faults of this process so far (fresh memory touched: after a release, every page)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    raise SystemExit(main())
