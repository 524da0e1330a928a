"""Diagnostic: the embedded broker's thread priorities, A/B, for the loop and the job alike.

The embedded broker (noida-db) rewrites its whole state file after writes on its ``autosave``
thread; its other threads answer fetches and produces. ``stack.kafka_snapshot_nice`` and
``stack.kafka_nice`` set their nice (docs/runbooks/stack.md). This runs, on one broker and one
topic, rounds of bench/streaming.py's loop and job (replay) under each setting, alternating
which setting goes first; the nices are switched between runs on the live broker's threads
(raising a thread's priority back needs root or CAP_SYS_NICE). Prints one JSON object: per
setting each round's rates and the medians, and the job's ratios to the loop of the same
setting. Never run as a timed test.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/streaming_broker_nice.py --records 300000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from statistics import median
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench's sibling modules

import streaming as bench
from streaming_cpu import settle
from streaming_replay import replay
from streaming_support import PARTITIONS, drop_topics, job_config, new_topic, output_topics, produce

from jobs.stack.embedded import SNAPSHOT_THREAD

SETTINGS = {"all_at_10": (10, 10), "snapshot_19_others_0": (0, 19)}
"""Name -> (nice of the request threads, nice of the ``autosave`` thread)."""


def main(argv: list[str] | None = None) -> int:
    """Produce once, then loop + job per setting and round; print the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--warmup", type=int, default=30_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {name: {"loop": [], "job": []} for name in SETTINGS}
    with bench.private_source(args.records, "kappa-bench-nice-") as (cfg, source):
        props = cfg.kafka.client_config()
        warm = new_topic(props, PARTITIONS)
        produce(props, warm, args.warmup, seed=2)
        settle()
        warm_cfg = job_config(cfg, warm)
        replay(warm_cfg, 100_000)  # untimed: JVM start, JIT, Python workers
        drop_topics(props, [warm, *output_topics(warm_cfg)])
        for round_index in range(args.repeats):
            names = list(SETTINGS) if round_index % 2 == 0 else list(reversed(SETTINGS))
            for name in names:
                _set_broker_nice(*SETTINGS[name])
                settle()
                outputs = [new_topic(props, PARTITIONS), new_topic(props, 1)]
                runs[name]["loop"].append(bench._loop(cfg, source, args.records, outputs))
                drop_topics(props, outputs)
                settle()
                job_cfg = job_config(cfg, source)
                runs[name]["job"].append(replay(job_cfg, 100_000))
                drop_topics(props, output_topics(job_cfg))
        _set_broker_nice(*SETTINGS["snapshot_19_others_0"])
    result = {"benchmark": "streaming_broker_nice", "records": args.records, "repeats": args.repeats,
              "settings": {name: _summary(r["loop"], r["job"]) for name, r in runs.items()}}
    print(json.dumps(result, indent=2))
    return 0


def _summary(loops: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> dict[str, Any]:
    loop = median(x["rows_per_s"] for x in loops)
    rates = {key: median(x[key] for x in jobs) for key in
             ("run_rows_per_s", "steady_span_rows_per_s", "sustained_rows_per_s")}
    return {"loop_rows_per_s": round(loop), **{f"job_{k}": round(v) for k, v in rates.items()},
            **{f"job_{k.removesuffix('_rows_per_s')}_vs_loop": round(v / loop, 2) for k, v in rates.items()},
            "loop_rounds": [x["rows_per_s"] for x in loops],
            "job_rounds": [{k: x[k] for k in ("run_rows_per_s", "steady_span_rows_per_s", "batch_ms")}
                           | {"first_batch_read_ms": (x["first_batch_task_max_ms"] or {}).get("read")}
                           for x in jobs]}


def _set_broker_nice(nice: int, snapshot_nice: int) -> None:
    """Set the nice of every thread of the running embedded broker (either way: needs root)."""
    for proc in psutil.Process().children(recursive=True):
        try:
            if not any("noida" in part for part in proc.cmdline()[:2]):
                continue
            threads = proc.threads()
        except psutil.Error:  # gone, or a zombie (Spark's finished workers)
            continue
        for thread in threads:
            try:
                name = Path(f"/proc/{proc.pid}/task/{thread.id}/comm").read_text().strip()
            except OSError:  # the thread ended
                continue
            os.setpriority(os.PRIO_PROCESS, thread.id, snapshot_nice if name == SNAPSHOT_THREAD else nice)


if __name__ == "__main__":
    sys.exit(main())
