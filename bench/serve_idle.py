"""Idle CPU of `kappa serve` and the embedded broker, then one SSE client's latency under load.

Starts the platform of bench/serve.py (private embedded stack, `kappa serve` as a subprocess),
lets it settle, then samples the CPU time (user + system, /proc via psutil) of the serve
process and of the broker's process group over --idle-seconds with no client and no record.
Then one SSE client reads while records are produced at --rate per second, and the delivery
latency (arrival minus Kafka timestamp) is reported, with the CPU used meanwhile. With
--collector an idle `kappa collect --http` runs beside them and its CPU is sampled too. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.serve import free_port, platform, run_round


def cpu_seconds(pid: int, group: bool = False) -> float:
    """CPU time of a process, or of every process of its process group."""
    procs = [p for p in psutil.process_iter() if _pgid(p.pid) == pid] if group else [psutil.Process(pid)]
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def sample(serve_pid: int, broker_pgid: int, seconds: float) -> dict[str, float]:
    """Share of one core used by each process over ``seconds`` (1.0 = one core busy)."""
    before = cpu_seconds(serve_pid), cpu_seconds(broker_pgid, group=True)
    began = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - began
    after = cpu_seconds(serve_pid), cpu_seconds(broker_pgid, group=True)
    serve, broker = ((b - a) / elapsed for a, b in zip(before, after, strict=True))
    return {"serve_core": round(serve, 4), "broker_core": round(broker, 4),
            "together_core": round(serve + broker, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument("--settle-seconds", type=float, default=5)
    parser.add_argument("--rate", type=int, default=1000, help="records produced per second under load")
    parser.add_argument("--seconds", type=float, default=10, help="length of the load round")
    parser.add_argument("--collector", action="store_true", help="also sample an idle collector")
    args = parser.parse_args()
    with platform() as (port, props, server, broker, env):
        collector = None
        if args.collector:
            collector = subprocess.Popen(
                [sys.executable, "-m", "jobs.cli", "collect", "--http", "--port", str(free_port()),
                 "--topic", "b.analyzed", "--dlq-topic", "b.summaries"],
                cwd=Path(__file__).resolve().parents[1], env={**os.environ, **env}, stderr=subprocess.DEVNULL)
        time.sleep(args.settle_seconds)
        began = cpu_seconds(collector.pid) if collector else 0.0
        idle = sample(server.pid, broker, args.idle_seconds)
        if collector:
            idle["collector_core"] = round((cpu_seconds(collector.pid) - began) / args.idle_seconds, 4)
            collector.terminate()
            collector.wait(15)
        before = cpu_seconds(server.pid), cpu_seconds(broker, group=True)
        began = time.monotonic()
        load = asyncio.run(run_round(port, props, "b.analyzed", 1, args.rate, args.seconds))
        elapsed = time.monotonic() - began
        after = cpu_seconds(server.pid), cpu_seconds(broker, group=True)
        load["serve_core"], load["broker_core"] = (round((b - a) / elapsed, 4)
                                                   for a, b in zip(before, after, strict=True))
        print(json.dumps({"bench": "serve_idle", "cpu_cores": os.cpu_count(),
                          "load_average": os.getloadavg()[0], "idle_seconds": args.idle_seconds,
                          "idle": idle, "load": load}, indent=1))


if __name__ == "__main__":
    main()
