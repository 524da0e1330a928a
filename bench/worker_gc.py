"""Benchmark: a forked Python worker's garbage collection after a task, with and without gc.freeze.

pyspark's worker daemon runs a full ``gc.collect()`` in a worker after every task. The project's
daemons import the tasks' libraries before they fork (jobs/streaming/daemon.py: pyarrow, pandas,
confluent-kafka, redis, pyspark's worker; jobs/loader/daemon.py: Great Expectations), so that
collection visits every inherited object unless the daemon froze them first
(jobs/spark/worker_daemon.py). This measures exactly that, without Spark: the process imports
what the chosen daemon imports, then for each variant forks ``--workers`` children one after
another; each child allocates a task's worth of objects (``--task-objects`` parsed-record-like
dicts, then dropped), then times pyspark's post-task ``gc.collect()`` ``--tasks`` times (a
reused worker runs one per task) and reports its CPU time and its private memory (USS: pages it
no longer shares with the daemon; a collection writes to the header of every object it visits).

* ``unfrozen``: pyspark's own daemon behaviour (the baseline);
* ``frozen``: ``gc.freeze()`` in the parent before the fork, as the project's daemons do.

Prints one JSON object. Never run as a timed test.

    .venv/bin/python bench/worker_gc.py
    .venv/bin/python bench/worker_gc.py --daemon loader
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the project's packages


def main(argv: list[str] | None = None) -> int:
    """Run both variants and print the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daemon", choices=("streaming", "loader"), default="streaming",
                        help="import what this daemon imports before forking")
    parser.add_argument("--workers", type=int, default=5, help="children forked per variant")
    parser.add_argument("--tasks", type=int, default=5, help="post-task collections per child")
    parser.add_argument("--task-objects", type=int, default=50_000,
                        help="dicts a task allocates (and drops) before its collection")
    args = parser.parse_args(argv)
    began = time.monotonic()
    _import_like(args.daemon)
    result: dict[str, Any] = {"benchmark": "worker_gc", "daemon": args.daemon,
                              "import_s": round(time.monotonic() - began, 2),
                              "tracked_objects_inherited": len(gc.get_objects()),
                              "workers": args.workers, "tasks": args.tasks,
                              "task_objects": args.task_objects}
    for variant in ("unfrozen", "frozen", "unfrozen", "frozen"):  # alternating: drift shows
        runs = result.setdefault(variant, {"children": []})["children"]
        runs.extend(_child(variant == "frozen", args.tasks, args.task_objects)
                    for _ in range(args.workers))
    for variant in ("unfrozen", "frozen"):
        children = result[variant]["children"]
        result[variant] |= {
            "collect_ms_median": median(ms for c in children for ms in c["collect_ms"]),
            "uss_mb_median": median(c["uss_mb"] for c in children)}
    result["collect_speedup"] = round(result["unfrozen"]["collect_ms_median"]
                                      / max(result["frozen"]["collect_ms_median"], 0.001), 1)
    result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    print(json.dumps(result, indent=2))
    return 0


def _import_like(daemon: str) -> None:
    if daemon == "streaming":
        from jobs.streaming.daemon import PRELOAD, preload

        missing = preload(PRELOAD)
        if missing:
            raise SystemExit(f"could not import {missing}: run `make setup` first")
    else:
        os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
        import great_expectations  # noqa: F401
    gc.collect()


def _child(frozen: bool, tasks: int, task_objects: int) -> dict[str, Any]:
    """Fork one worker; it runs ``tasks`` tasks, each followed by pyspark's gc.collect()."""
    if frozen:
        gc.freeze()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker
        os.close(read)
        collect_ms = []
        for _ in range(tasks):
            records = [{"rsvp_id": i, "event": {"id": str(i)}, "member": {"id": i}, "guests": 0}
                       for i in range(task_objects)]
            del records
            cpu = time.process_time()
            gc.collect()
            collect_ms.append(round((time.process_time() - cpu) * 1000, 2))
        uss = psutil.Process().memory_full_info().uss
        os.write(write, json.dumps({"collect_ms": collect_ms, "uss_mb": round(uss / 2**20, 1)}).encode())
        os._exit(0)
    os.close(write)
    if frozen:
        gc.unfreeze()
    with os.fdopen(read) as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data)


if __name__ == "__main__":
    raise SystemExit(main())
