"""The job's side of bench/streaming.py: one replay through ``run_stream``, and its rates.

Shared by bench/streaming.py and bench/streaming_broker_nice.py. Never run as a timed test.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from itertools import pairwise
from statistics import median
from typing import Any

from jobs.config.load import KappaConfig


def summary(jobs: list[dict[str, Any]], loops: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of a job variant's rounds, and their ratios to the loop's median rate.

    Also each round's run rate against the loop run just before it in the same round
    (``job_run_vs_loop_by_round``): the machine's pace drifts between rounds, less within one.
    """
    loop_rate = median(x["rows_per_s"] for x in loops)
    by_round = [round(job["run_rows_per_s"] / loop["rows_per_s"], 2)
                for job, loop in zip(jobs, loops, strict=True)]
    sustained = median(x["sustained_rows_per_s"] for x in jobs)
    span = median(x["steady_span_rows_per_s"] for x in jobs)
    run_rate = median(x["run_rows_per_s"] for x in jobs)
    return {"job_sustained_rows_per_s": round(sustained), "job_steady_span_rows_per_s": round(span),
            "job_wall_rows_per_s": round(median(x["wall_rows_per_s"] for x in jobs)),
            "job_run_rows_per_s": round(run_rate),
            "job_vs_loop": round(sustained / loop_rate, 2),
            "job_steady_span_vs_loop": round(span / loop_rate, 2),
            "job_run_vs_loop": round(run_rate / loop_rate, 2),
            "job_run_vs_loop_by_round": by_round, "job_run_vs_loop_by_round_median": median(by_round),
            "job_cpu_us_per_event": median(x["cpu_us_per_event"] for x in jobs)}


def replay(job_cfg: KappaConfig, per_trigger: int, output: bool = True) -> dict[str, Any]:
    """``run_stream`` in replay mode over the job config's source; its rates from the batch metrics.

    The rates are defined in bench/streaming.py's docstring (sustained, steady span, run, wall).
    """
    from jobs.streaming.job import run_stream
    from jobs.streaming.redis_sink import connect
    from jobs.streaming.run_spec import SINKS, RunSpec

    sinks = frozenset(SINKS) if output else frozenset({"redis"})
    spec = RunSpec(mode="replay", starting="earliest", ending="latest",
                   max_offsets_per_trigger=per_trigger, fresh=True, sinks=sinks)
    began = time.monotonic()
    report = run_stream(job_cfg, spec, progress=lambda message: None)
    wall = time.monotonic() - began
    client = connect(job_cfg)
    s = job_cfg.streaming
    history = [json.loads(m) for m in client.lrange(f"{s.redis_prefix}:metrics:{spec.query_name(job_cfg)}"
                                                    ":history", 0, -1)]
    client.close()
    batches = sorted((b for b in history if b["input_rows"]), key=lambda b: b["batch_id"])
    steady = batches[1:] or batches
    rows = sum(b["input_rows"] for b in steady)
    # a batch's own time: its foreachBatch, plus its Redis apply when that was not in the background
    seconds = sum(b["batch_duration_ms"] + (0 if job_cfg.streaming.apply_in_background else
                                            sum(b.get("apply_ms", {}).values())) for b in steady) / 1000
    phases: dict[str, list[int]] = defaultdict(list)
    task_phases: dict[str, list[int]] = defaultdict(list)
    for batch in steady:
        for name, ms in batch.get("phases_ms", {}).items():
            phases[name].append(ms)
        for name, ms in batch.get("tasks", {}).get("max_ms", {}).items():
            task_phases[name].append(ms)
    # every batch, the first included, Spark's work between batches and the last Redis apply
    # (applied_ms; in the background it ends after its batch), not the query's start
    def start_ms(batch: dict[str, Any]) -> int:
        return batch["emitted_ms"] - batch["batch_duration_ms"]

    end_ms = max(b.get("applied_ms", b["emitted_ms"]) for b in batches)
    run_s = (end_ms - start_ms(batches[0])) / 1000
    span_s = (end_ms - start_ms(steady[0])) / 1000
    return {"records": report.records_read, "late": sum(b.get("late_rows", 0) for b in batches),
            "wall_s": round(wall, 2),
            "wall_rows_per_s": round(report.records_read / wall),
            "run_s": round(run_s, 2), "run_rows_per_s": round(report.records_read / run_s),
            "sustained_rows_per_s": round(rows / seconds) if seconds else 0,
            "steady_span_rows_per_s": round(rows / span_s) if span_s > 0 else 0,
            "batches": len(batches), "batch_ms": [b["batch_duration_ms"] for b in batches],
            "phases_ms_median": {k: median(v) for k, v in phases.items()},
            # per batch, the slowest task's phases (metrics "tasks"); the first batch apart
            "first_batch_task_max_ms": batches[0].get("tasks", {}).get("max_ms"),
            "task_max_ms_by_batch": [b.get("tasks", {}).get("max_ms") for b in batches],
            # Spark's work between a batch's end and the next one's start (commit, planning)
            "gap_ms": [start_ms(b) - a["emitted_ms"] for a, b in pairwise(batches)],
            "task_max_ms_median": {k: median(v) for k, v in task_phases.items()},
            "written": report.written, "load_avg_1m": round(os.getloadavg()[0], 2)}
