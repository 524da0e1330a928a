"""The live job's latency while a warm replay runs beside it, the replay at niceness 0 or 10.

The Spark service serves each request at the niceness of its caller (docs/runbooks/spark.md). This
measures what that costs the live job: three scenarios, each a fresh live RSVP job in this process
(its own Spark, as the live job runs in production: not through the service) with a paced producer,
event -> visible-in-Redis latency over ``--seconds`` (bench/streaming_latency.py):

- ``alone``: no replay beside the live job;
- ``replay_nice0``: a warm replay of ``--records`` RSVPs (``kappa stream run --mode replay``,
  attached to the Spark service) starts ``--settle`` seconds into the paced run, its CLI at
  niceness 0, so the service's JVM and workers run it at 0;
- ``replay_nice10``: the same with the CLI at ``spark.service_nice`` (10).

Needs the configured stack up (``kappa stack up``); starts the Spark service when none is up and
stops it after. Prints one JSON object. Usage::

    .venv/bin/python bench/spark_service_live.py --records 50000 --rate 500 --seconds 45
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import streaming_latency
from spark_service_nice import KAPPA, attachable, replay
from streaming_support import PARTITIONS, drop_topics, exit_on_sigterm, new_topic, produce

from jobs.config.load import PROJECT_ROOT, load_config
from jobs.spark.service_state import read_state

SCENARIOS = ("alone", "replay_nice0", "replay_nice10")


def quietly_attachable(env: dict[str, str]) -> dict[str, Any]:
    """:func:`attachable`, its commands' output on stderr (stdout carries only the JSON result)."""
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        return attachable(env)
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def scenario(cfg: Any, args: argparse.Namespace, way: str, replay_source: str, idle_nice: int,
             env: dict[str, str]) -> dict[str, Any]:
    """One live-latency run, with a warm replay started ``settle`` seconds into it (or none)."""
    replayed: dict[str, Any] = {}
    original = streaming_latency._paced

    def run_replay() -> None:
        try:
            quietly_attachable(env)
            replayed.update(replay(env, cfg.kafka.client_config(), replay_source, args.records,
                                   "warm_caller_nice" if way == "replay_nice0" else "warm_idle_nice",
                                   idle_nice))
        except Exception as exc:  # reported with the scenario
            replayed["error"] = f"{type(exc).__name__}: {exc}"[-800:]

    def paced(props: dict[str, str], source: str, rate: float, seconds: float) -> Any:
        timer = threading.Timer(args.settle, run_replay) if way != "alone" else None
        if timer is not None:
            timer.start()
        try:
            return original(props, source, rate, seconds)
        finally:
            if timer is not None:
                timer.join()

    streaming_latency._paced = paced
    load_before = os.getloadavg()[0]
    try:
        measured = streaming_latency.latency(cfg, argparse.Namespace(
            rate=args.rate, seconds=args.seconds, settle=args.settle, retention_s=None))
    finally:
        streaming_latency._paced = original
    keep = ("events", "seen", "p50_ms", "p90_ms", "p99_ms", "max_ms", "job_error")
    return {"live": {k: measured.get(k) for k in keep}, "replay": replayed or None,
            "load1_before": round(load_before, 1), "load1_after": round(os.getloadavg()[0], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000, help="RSVPs of the warm replay")
    parser.add_argument("--rate", type=float, default=500.0, help="events/s into the live job")
    parser.add_argument("--seconds", type=float, default=45.0, help="measured seconds of each live run")
    parser.add_argument("--settle", type=float, default=10.0, help="unmeasured seconds before those; "
                                                                   "the replay starts then")
    args = parser.parse_args()
    exit_on_sigterm()
    cfg = load_config()
    props = cfg.kafka.client_config()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    started = read_state(cfg) is None
    if started:
        subprocess.run([*KAPPA, "spark", "up", "--timeout", "900"], env=env, cwd=PROJECT_ROOT, check=True,
                       stdout=sys.stderr)
    status = quietly_attachable(env)
    idle_nice = (status.get("service") or {}).get("idle_nice", cfg.spark.service_nice)
    source = new_topic(props, PARTITIONS)
    runs: dict[str, Any] = {}
    error = None
    try:
        produce(props, source, args.records, seed=7)
        for way in SCENARIOS:
            runs[way] = scenario(cfg, args, way, source, idle_nice, env)
    except Exception as exc:  # the scenarios done so far are still reported
        error = f"{type(exc).__name__}: {exc}"[-1000:]
    finally:
        drop_topics(props, [source])
        if started:
            subprocess.run([*KAPPA, "spark", "down"], env=env, cwd=PROJECT_ROOT, check=False,
                           stdout=sys.stderr)
    print(json.dumps({"benchmark": "spark_service_live", "records": args.records, "rate_per_s": args.rate,
                      "seconds": args.seconds, "settle_s": args.settle, "cores": os.cpu_count(),
                      "idle_nice": idle_nice, "date": time.strftime("%Y-%m-%d"), "runs": runs,
                      "error": error}, indent=2))


if __name__ == "__main__":
    main()
