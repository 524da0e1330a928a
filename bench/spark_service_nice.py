"""A warm replay beside unrelated CPU load: the Spark service at its idle niceness vs the caller's.

Runs ``kappa stream run --mode replay`` of ``--records`` RSVPs from process start to exit, beside
``--busy`` busy-loop processes at niceness 0 that this benchmark starts and kills by pid, three ways:

- ``warm_idle_nice``: attached to the service, the CLI at niceness ``spark.service_nice`` (10): the
  service serves a request at its caller's niceness, so this is the service's JVM at 10, as when
  it kept its idle niceness for every request;
- ``warm_caller_nice``: attached, the CLI at niceness 0 (the JVM runs at 0 for the request);
- ``cold``: ``KAPPA_SPARK_SERVICE=off``, a fresh Spark of the CLI at niceness 0.

Needs the configured stack up (``kappa stack up``); starts the Spark service when none is up and
stops it after. Prints one JSON object: each run's wall seconds, whether it attached, the 1-minute
load average before and after it. Usage::

    .venv/bin/python bench/spark_service_nice.py --records 50000 --rounds 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from statistics import median
from typing import Any

from replay_cli import forget
from streaming_support import PARTITIONS, drop_topics, exit_on_sigterm, new_topic, produce

from jobs.common.config import PROJECT_ROOT, load_config
from jobs.common.spark_state import read_state

KAPPA = [sys.executable, "-m", "jobs.cli"]
WAYS = ("cold", "warm_idle_nice", "warm_caller_nice")


def replay(env: dict[str, str], props: dict[str, str], source: str, records: int, way: str,
           idle_nice: int) -> dict[str, Any]:
    """One replay CLI run of ``source`` into fresh topics and a fresh Redis prefix."""
    name = uuid.uuid4().hex[:8]
    outputs = [new_topic(props, PARTITIONS), new_topic(props, PARTITIONS), new_topic(props, 1)]
    run_env = {**env, "KAPPA_STREAMING__SOURCE_TOPIC": source,
               "KAPPA_STREAMING__ANALYZED_TOPIC": outputs[0], "KAPPA_STREAMING__SUMMARIES_TOPIC": outputs[1],
               "KAPPA_STREAMING__DLQ_TOPIC": outputs[2], "KAPPA_STREAMING__REDIS_PREFIX": f"bench{name}",
               "KAPPA_STREAMING__QUERY_NAME": f"bench-{name}"}
    if way == "cold":
        run_env["KAPPA_SPARK_SERVICE"] = "off"
    nice = idle_nice if way == "warm_idle_nice" else 0
    command = [*(["nice", "-n", str(nice)] if nice else []), *KAPPA, "stream", "run", "--mode", "replay",
               "--from", "earliest", "--to", "latest", "--fresh", "--json"]
    load_before = os.getloadavg()[0]
    began = time.monotonic()
    try:
        done = subprocess.run(command, env=run_env, cwd=PROJECT_ROOT, capture_output=True, text=True,
                              check=False, timeout=1800)
    finally:
        forget(props, outputs, f"bench{name}")
    wall = time.monotonic() - began
    if done.returncode != 0:
        raise RuntimeError(f"{way}: exited {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["records_read"] == records, report
    return {"wall_s": round(wall, 1), "run_s": report["duration_s"], "cli_nice": nice,
            "attached": "attached to the Spark service" in done.stderr,
            "load1_before": round(load_before, 1), "load1_after": round(os.getloadavg()[0], 1)}


def attachable(env: dict[str, str]) -> dict[str, Any]:
    """The service's status (``kappa spark status --json``), restarted first when it refuses runs
    (code under jobs/ changed since it started: the machine is shared with people editing it)."""
    def status() -> dict[str, Any]:
        return json.loads(subprocess.run([*KAPPA, "spark", "status", "--json"], env=env, cwd=PROJECT_ROOT,
                                         capture_output=True, text=True, check=False).stdout)

    if not (current := status())["attach"]:
        subprocess.run([*KAPPA, "spark", "down"], env=env, cwd=PROJECT_ROOT, check=False)
        subprocess.run([*KAPPA, "spark", "up", "--timeout", "900"], env=env, cwd=PROJECT_ROOT,
                       check=True)
        current = status()
    return current


def busy(count: int) -> list[subprocess.Popen]:
    """``count`` busy-loop processes at niceness 0 (killed by pid by the caller)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--busy", type=int, default=2, help="busy-loop processes beside the runs")
    args = parser.parse_args()
    exit_on_sigterm()
    cfg = load_config()
    props = cfg.kafka.client_config()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    started = read_state(cfg) is None
    if started:
        subprocess.run([*KAPPA, "spark", "up", "--timeout", "900"], env=env, cwd=PROJECT_ROOT,
                       check=True)
    status = attachable(env)
    idle_nice = (status.get("service") or {}).get("idle_nice", cfg.spark.service_nice)
    source = new_topic(props, PARTITIONS)
    loops: list[subprocess.Popen] = []
    runs: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    error = None
    try:
        produce(props, source, args.records, seed=7)
        loops = busy(args.busy)
        time.sleep(10)  # the load average starts to count them
        for index in range(args.rounds):
            for way in WAYS[index % 3:] + WAYS[:index % 3]:
                if way != "cold":
                    attachable(env)
                runs[way].append(replay(env, props, source, args.records, way, idle_nice))
    except Exception as exc:  # the runs done so far are still reported
        error = f"{type(exc).__name__}: {exc}"[-1000:]
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
        drop_topics(props, [source])
        if started:
            subprocess.run([*KAPPA, "spark", "down"], env=env, cwd=PROJECT_ROOT, check=False)
    print(json.dumps({"benchmark": "spark_service_nice", "records": args.records, "busy": args.busy,
                      "cores": os.cpu_count(), "spark_master": cfg.spark.master, "idle_nice": idle_nice,
                      "service": status.get("service"), "runs": runs,
                      "median_wall_s": {way: median(r["wall_s"] for r in done) for way, done in runs.items()
                                        if done},
                      "error": error},
                     indent=2))


if __name__ == "__main__":
    main()
