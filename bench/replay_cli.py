"""A replay as users run it: ``kappa stream run --mode replay`` from process start to exit.

Against the hand-written one-process loop (bench/streaming_loop.py, also its own process, start
to exit), on the same topic in the same run, rounds alternating. With ``--views-baseline`` a third
system takes its turn: the loop that also keeps the job's Redis views and publishes its summaries
with the job's code (``streaming_loop.py --views``), the baseline for all the work a replay does.
Two workloads (``--workloads``):
``skewed`` (the generator's events: few distinct, as the other benchmarks) and
``high-cardinality`` (every RSVP its own event id, topics and cities as skewed), each with the
end-to-end tests' fault mix (1 % malformed, late, out-of-order, duplicates). Per run: wall time
(process start to exit), the job's own run time from its report (``duration_s``: the query from
its start to its last batch), start-up = wall - run time, events/s over the wall, the peak
RSS of the process tree, and the CPU each kind of process on the machine used during the run
(``cpu_s``: the broker, Redis, the Spark service, its JVM and Python workers, the command
itself). The job runs with every sink (Kafka outputs, the fenced Redis apply).

The stack is the configured one (``KAPPA_*`` and conf/ as every command: ``kappa stack up`` first);
each run writes fresh output topics and its own Redis prefix. Unless ``--no-rest-client``, a
``kappa serve`` started by the benchmark answers a REST client (a process of its own) that sends
``GET /api/v1/cities`` every 10 ms (serve's per-client rate limit raised for it) during every run,
the job's and the loop's: its latency while the job applies to Redis, against the same client
while the loop (which writes no Redis) runs.
Prints JSON.

    .venv/bin/python bench/replay_cli.py --records 300000 --rounds 3
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import psutil
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from streaming_cpu import MachineCpu, service_pids, settle
from streaming_support import PARTITIONS, drop_topics, exit_on_sigterm, new_topic, percentiles, produce

from jobs.config.load import PROJECT_ROOT, load_config
from jobs.orchestration.settings import free_port

WORKLOADS = ("skewed", "high-cardinality")


def loop_timing(result: dict[str, Any], records: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A loop baseline's report (its last stdout line, taken out of ``result``) and its timing:
    run and start-up seconds (wall minus the loop's own ``seconds``), records/s over the wall."""
    report = json.loads(result.pop("last"))
    return report, {"run_s": report["seconds"], "startup_s": round(result["wall_s"] - report["seconds"], 2),
                    "records_per_s": round(records / result["wall_s"])}


def timed(command: list[str], env: dict[str, str], keep_stderr: bool = False) -> dict[str, Any]:
    """Run ``command``; wall seconds from start to exit, peak RSS of its tree (MB), its last stdout
    line, and the CPU seconds each kind of the run's own processes used meanwhile (:class:`MachineCpu`:
    the command's tree, this benchmark's ``kappa serve``, the stack and the Spark service).
    ``keep_stderr``: its stderr too (``stderr``), else it is discarded."""
    peak = [0.0]
    cpu = MachineCpu(service_pids(load_config()))
    began = time.monotonic()
    process = subprocess.Popen(command, env=env, cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE if keep_stderr else subprocess.DEVNULL, text=True)
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(process.pid)
        for tick in itertools.count():
            try:
                tree = [root, *root.children(recursive=True)]
                peak[0] = max(peak[0], sum(p.memory_info().rss for p in tree if p.is_running()) / 2**20)
            except psutil.Error:
                pass
            if tick % 5 == 4:  # every second: a process that exits loses at most that much
                cpu.sample()
            if done.wait(0.2):
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = process.communicate()
    wall = time.monotonic() - began
    done.set()
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:6])} ... exited {process.returncode}: {out[-2000:]}")
    return {"wall_s": round(wall, 2), "peak_rss_mb": round(peak[0]), "cpu_s": cpu.by_kind(),
            "last": out.strip().splitlines()[-1], **({"stderr": err} if keep_stderr else {})}


def rest_client(url: str, stop: Any, out: Any) -> None:
    """``GET url`` every 10 ms until ``stop``; the latencies (s) and failed requests to ``out``."""
    import httpx

    latencies, failed = [], 0
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            began = time.perf_counter()
            try:
                client.get(url).raise_for_status()
            except httpx.HTTPError:
                failed += 1
            latencies.append(time.perf_counter() - began)
            time.sleep(0.01)
    out.put((latencies, failed))


class RestProbe:
    """``kappa serve`` on the configured stack and a REST client process, run by run."""

    def __init__(self, env: dict[str, str]) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/api/v1/cities"
        # the client sends 100 requests/s from one address: above serve's per-client rate limit
        limits = {"KAPPA_SERVE__RATE_LIMIT_PER_S": "1000", "KAPPA_SERVE__RATE_LIMIT_BURST": "1000"}
        self.server = subprocess.Popen([sys.executable, "-m", "jobs.cli", "serve", "--port", str(port)],
                                       env={**env, **limits}, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.url, timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline or self.server.poll() is not None:
                    raise RuntimeError("kappa serve did not answer within 60 s") from None
                time.sleep(0.3)

    def around(self, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``run()``, with the client's latencies during it added as ``rest``."""
        stop, out = multiprocessing.Event(), multiprocessing.Queue()
        client = multiprocessing.Process(target=rest_client, args=(self.url, stop, out))
        client.start()
        try:
            result = run()
        finally:
            stop.set()
            latencies, failed = out.get(timeout=60)
            client.join()
        return result | {"rest": percentiles(latencies, digits=1) | {"failed": failed}}

    def close(self) -> None:
        self.server.terminate()
        self.server.wait(30)


def job_run(env: dict[str, str], props: dict[str, str], source: str, records: int) -> dict[str, Any]:
    name = uuid.uuid4().hex[:8]
    outputs = [new_topic(props, PARTITIONS), new_topic(props, PARTITIONS), new_topic(props, 1)]
    run_env = {**env, "KAPPA_STREAMING__SOURCE_TOPIC": source,
               "KAPPA_STREAMING__ANALYZED_TOPIC": outputs[0],
               "KAPPA_STREAMING__SUMMARIES_TOPIC": outputs[1],
               "KAPPA_STREAMING__DLQ_TOPIC": outputs[2],
               "KAPPA_STREAMING__REDIS_PREFIX": f"bench{name}",
               "KAPPA_STREAMING__QUERY_NAME": f"bench-{name}"}
    try:
        result = timed([sys.executable, "-m", "jobs.cli", "stream", "run", "--mode", "replay", "--from",
                        "earliest", "--to", "latest", "--fresh", "--json"], run_env)
    finally:
        forget(props, outputs, f"bench{name}")
    report = json.loads(result.pop("last"))
    assert report["records_read"] == records, report
    startup = round(result["wall_s"] - report["duration_s"], 2)
    return result | {"run_s": report["duration_s"], "startup_s": startup,
                     "events_per_s": round(records / result["wall_s"]), "late": report["late"],
                     "dead_lettered": report["dead_lettered"]}


def loop_run(env: dict[str, str], props: dict[str, str], source: str, records: int,
             views: bool = False) -> dict[str, Any]:
    outputs = [new_topic(props, PARTITIONS), new_topic(props, 1)]
    command = [sys.executable, str(Path(__file__).with_name("streaming_loop.py")), "--source", source,
               "--partitions", str(PARTITIONS), "--records", str(records),
               "--analyzed", outputs[0], "--dlq", outputs[1]]
    prefix = f"bench{uuid.uuid4().hex[:8]}" if views else None
    if views:
        outputs.append(new_topic(props, PARTITIONS))
        command += ["--views", f"{prefix}", "--summaries", outputs[2]]
    try:
        result = timed(command, env)
    finally:
        forget(props, outputs, prefix)
    report, timing = loop_timing(result, records)
    rate = timing.pop("records_per_s")   # named as the job's figure beside it
    return result | timing | {"events_per_s": rate, "late": report["late"], "dead_lettered": report["dlq"]}


def loop_views_run(env: dict[str, str], props: dict[str, str], source: str, records: int) -> dict[str, Any]:
    """The loop that also keeps the job's Redis views and publishes its summaries (``--views``)."""
    return loop_run(env, props, source, records, views=True)


def forget(props: dict[str, str], topics: list[str], prefix: str | None = None) -> None:
    """Delete a run's output topics and Redis keys: the broker rewrites all it holds after writes
    and Redis its whole append-only file, so what earlier runs left would slow the later ones."""
    if prefix is not None:
        client = redis.Redis(**load_config().redis.client_kwargs())
        keys = list(client.scan_iter(f"{prefix}:*", count=10_000))
        for i in range(0, len(keys), 10_000):
            client.unlink(*keys[i:i + 10_000])
        client.close()
    drop_topics(props, topics)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--no-rest-client", action="store_true", help="no kappa serve, no REST client")
    parser.add_argument("--views-baseline", action="store_true",
                        help="also run the loop that keeps the job's Redis views and summaries (--views)")
    args = parser.parse_args()
    exit_on_sigterm()
    cfg = load_config()
    props = cfg.kafka.client_config()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    out: dict[str, Any] = {"benchmark": "replay_cli", "records": args.records, "cores": os.cpu_count(),
                           "spark_master": cfg.spark.master, "workloads": {}}
    probe = None if args.no_rest_client else RestProbe(env)
    try:
        _workloads(args, props, env, probe, out)
    finally:
        if probe is not None:
            probe.close()
    print(json.dumps(out, indent=2))


def _workloads(args: argparse.Namespace, props: dict[str, str], env: dict[str, str],
               probe: RestProbe | None, out: dict[str, Any]) -> None:
    for workload in args.workloads.split(","):
        source = new_topic(props, PARTITIONS)
        produce(props, source, args.records, seed=7, distinct_events=workload == "high-cardinality")
        settle()
        rounds = []
        systems = [loop_run, job_run, *([loop_views_run] if args.views_baseline else [])]
        for index in range(args.rounds):
            order = systems[index % len(systems):] + systems[:index % len(systems)]
            runs = {}
            for fn in order:
                def run(fn: Callable[..., dict[str, Any]] = fn, source: str = source) -> dict[str, Any]:
                    return fn(env, props, source, args.records)
                runs[fn.__name__.removesuffix("_run")] = probe.around(run) if probe else run()
            for baseline in ("loop", "loop_views"):
                if baseline in runs:
                    runs[f"job_vs_{baseline}"] = round(
                        runs["job"]["events_per_s"] / runs[baseline]["events_per_s"], 2)
            rounds.append(runs)
        drop_topics(props, [source])
        summary = out["workloads"][workload] = {
            "rounds": rounds, "median_job_vs_loop": median(r["job_vs_loop"] for r in rounds),
            "median_job_startup_s": median(r["job"]["startup_s"] for r in rounds)}
        if args.views_baseline:
            summary["median_job_vs_loop_views"] = median(r["job_vs_loop_views"] for r in rounds)
        if probe is not None:
            summary["rest_p99_ms_median"] = {
                fn.__name__.removesuffix("_run"): median(r[fn.__name__.removesuffix("_run")]["rest"]["p99_ms"]
                                                         for r in rounds) for fn in systems}


if __name__ == "__main__":
    main()
