"""A warm replay beside unrelated CPU load: the Spark service at its idle niceness vs the caller's.

Runs ``kappa stream run --mode replay`` of ``--records`` RSVPs from process start to exit, beside
``--busy`` busy-loop processes at niceness 0 that this benchmark starts and kills by pid, three ways:

- ``warm_idle_nice``: attached to the service, the CLI at niceness ``spark.service_nice`` (10): the
  service serves a request at its caller's niceness, so this is the service's JVM at 10, as when
  it kept its idle niceness for every request;
- ``warm_caller_nice``: attached, the CLI at niceness 0 (the JVM runs at 0 for the request);
- ``cold``: ``KAPPA_SPARK_SERVICE=off``, a fresh Spark of the CLI at niceness 0.

With ``--live-rate N`` the CPU beside the replays is a live job instead of busy loops:
``kappa stream run --mode live`` at niceness 0 with ``KAPPA_SPARK_SERVICE=off`` (its own cold
Spark, as production's live job), on fresh topics, Redis prefix and query name, fed ``N`` RSVPs/s
by a paced producer. Its event -> visible-in-Redis latency (the fence poller of
bench/streaming_latency.py) is measured over windows: ``alone`` (``--alone-seconds``, nothing
beside it), ``warm_caller_nice`` and ``warm_idle_nice`` (while such a replay runs), each after
``--gap`` unmeasured seconds.

Needs the configured stack up (``kappa stack up``); starts the Spark service when none is up and
stops it after. Prints one JSON object: each run's wall seconds, whether it attached, the 1-minute
load average before and after it (with ``--live-rate``, the live job's latency in each window).
Usage::

    .venv/bin/python bench/spark_service_nice.py --records 50000 --rounds 1
    .venv/bin/python bench/spark_service_nice.py --records 50000 --live-rate 500
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from statistics import median
from typing import Any

from replay_cli import forget
from streaming_latency import _paced, _visible, fence_offsets
from streaming_support import (
    PARTITIONS,
    TOPIC_NAMES,
    drop_topics,
    exit_on_sigterm,
    new_topic,
    percentiles,
    produce,
)

from jobs.config.load import PROJECT_ROOT, load_config
from jobs.spark.service_state import read_state

KAPPA = [sys.executable, "-m", "jobs.cli"]
WAYS = ("cold", "warm_idle_nice", "warm_caller_nice")
LIVE_WAYS = ("alone", "warm_caller_nice", "warm_idle_nice")


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
        subprocess.run([*KAPPA, "spark", "down"], env=env, cwd=PROJECT_ROOT, check=False, stdout=sys.stderr)
        subprocess.run([*KAPPA, "spark", "up", "--timeout", "900"], env=env, cwd=PROJECT_ROOT,
                       check=True, stdout=sys.stderr)
        current = status()
    return current


def busy(count: int) -> list[subprocess.Popen]:
    """``count`` busy-loop processes at niceness 0 (killed by pid by the caller)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


class LiveJob:
    """``kappa stream run --mode live`` at niceness 0 on its own cold Spark, fresh topics, prefix and
    query; a paced producer into its source and a poller of its Redis fence (as
    bench/streaming_latency.py). :meth:`stop` ends all of them, the job by its pid."""

    def __init__(self, cfg: Any, env: dict[str, str], rate: float) -> None:
        from jobs.streaming.redis_sink import connect

        self.props, self.rate, name = cfg.kafka.client_config(), rate, uuid.uuid4().hex[:8]
        single = ("dlq_topic", "metrics_topic", "errors_topic")
        self.topics = {n: new_topic(self.props, 1 if n in single else PARTITIONS) for n in TOPIC_NAMES}
        self.source, self.prefix = self.topics["source_topic"], f"bench{name}"
        self.log = tempfile.TemporaryFile()
        live_env = {**env, "KAPPA_SPARK_SERVICE": "off", "KAPPA_STREAMING__REDIS_PREFIX": self.prefix,
                    "KAPPA_STREAMING__QUERY_NAME": f"bench-{name}",
                    **{f"KAPPA_STREAMING__{n.upper()}": t for n, t in self.topics.items()}}
        self.process = subprocess.Popen(
            [*KAPPA, "stream", "run", "--mode", "live", "--from", "earliest"], env=live_env,
            cwd=PROJECT_ROOT, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        os.setpriority(os.PRIO_PROCESS, self.process.pid, 0)  # before it starts its JVM, which inherits it
        self.client = connect(cfg)
        self.sent: list[tuple[int, int, float]] = []
        self.samples: list[tuple[float, dict[int, int]]] = []
        self.halt, self.polled = threading.Event(), threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self, timeout: float = 900) -> float:
        """Wait for the job's first applied batch (feeding it), then pace and poll; the seconds waited."""
        began, fence = time.monotonic(), f"{self.prefix}:fence:summaries"
        while self.client.hget(fence, "batch_id") is None:
            if self.process.poll() is not None or time.monotonic() - began > timeout:
                raise RuntimeError(f"the live job applied no batch in {time.monotonic() - began:.0f} s "
                                   f"(exit {self.process.poll()}): {self.output()}")
            produce(self.props, self.source, 30, seed=3)
            time.sleep(1)
        self.threads = [threading.Thread(target=_paced, daemon=True, args=(
            self.props, self.source, self.rate, 10**9, self.halt, self.sent)),
            threading.Thread(target=self._poll, args=(fence,), daemon=True)]
        for thread in self.threads:
            thread.start()
        return round(time.monotonic() - began, 1)

    def _poll(self, fence: str) -> None:
        while not self.polled.is_set():
            raw = self.client.hgetall(fence)
            self.samples.append((time.time(), fence_offsets(raw, self.source)))
            time.sleep(0.01)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-1500:]

    def drain(self, timeout: float = 120) -> None:
        """Stop producing; poll on until the fence is past every produced record (or ``timeout``)."""
        self.halt.set()
        if self.threads:
            self.threads[0].join(60)
        last = {p: max((o for q, o, _ in self.sent if q == p), default=-1) for p in range(PARTITIONS)}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(
                (self.samples[-1][1].get(p, 0) if self.samples else 0) <= o for p, o in last.items()
                if o >= 0):
            time.sleep(0.2)
        self.polled.set()

    def latency(self, began: float, ended: float) -> dict[str, Any]:
        """Percentiles of the records produced in [began, ended) (``seen``: those visible at all)."""
        measured = [(p, o, t) for p, o, t in self.sent if began <= t < ended]
        at = percentiles(_visible(measured, self.samples))
        return {"events": len(measured), "seen": at.pop("events"), **at}

    def stop(self) -> dict[str, Any]:
        """SIGTERM the job (it stops after its batch), SIGKILL its group after 120 s; drop its data."""
        self.halt.set()
        self.polled.set()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.client.close()
        forget(self.props, list(self.topics.values()), self.prefix)
        return {"exit": self.process.returncode, "output_tail": self.output()[-400:]}


def live_windows(args: argparse.Namespace, cfg: Any, env: dict[str, str], source: str, idle_nice: int
                 ) -> dict[str, Any]:
    """The live job's latency alone and beside each kind of warm replay, ``args.rounds`` times."""
    job = LiveJob(cfg, env, args.live_rate)
    out: dict[str, Any] = {"rate_per_s": args.live_rate, "windows": {way: [] for way in LIVE_WAYS}}
    spans: list[tuple[str, float, float, dict[str, Any]]] = []
    try:
        out["start_s"] = job.start()
        out["job_nice"] = os.getpriority(os.PRIO_PROCESS, job.process.pid)
        for index in range(args.rounds):
            for way in LIVE_WAYS[index % 3:] + LIVE_WAYS[:index % 3]:
                if way != "alone":
                    attachable(env)
                time.sleep(args.gap)
                load_before, began = os.getloadavg()[0], time.time()
                if way == "alone":
                    time.sleep(args.alone_seconds)
                    run = {"load1_before": round(load_before, 1), "load1_after": round(os.getloadavg()[0], 1)}
                else:
                    run = replay(env, cfg.kafka.client_config(), source, args.records, way, idle_nice)
                spans.append((way, began, time.time(), run))
                if job.process.poll() is not None:
                    raise RuntimeError(f"the live job exited {job.process.returncode}: {job.output()}")
        job.drain()
    except Exception as exc:  # the windows measured so far are still reported
        out["error"] = f"{type(exc).__name__}: {exc}"[-1500:]
    finally:
        out["job"] = job.stop()
    for way, began, ended, run in spans:
        out["windows"][way].append({"live": job.latency(began, ended), "window_s": round(ended - began, 1),
                                    **({"replay": run} if way != "alone" else run)})
    return out


def replay_rounds(args: argparse.Namespace, env: dict[str, str], props: dict[str, str], source: str,
                  idle_nice: int) -> dict[str, Any]:
    """Each way of :data:`WAYS` ``args.rounds`` times, in a rotating order; their median wall seconds."""
    runs: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    for index in range(args.rounds):
        for way in WAYS[index % 3:] + WAYS[:index % 3]:
            if way != "cold":
                attachable(env)
            runs[way].append(replay(env, props, source, args.records, way, idle_nice))
    return {"runs": runs, "median_wall_s": {way: median(r["wall_s"] for r in done)
                                            for way, done in runs.items() if done}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--busy", type=int, default=None,
                        help="busy-loop processes beside the runs (default 2; 0 with --live-rate)")
    parser.add_argument("--live-rate", type=float, default=None, help="RSVPs/s into a live job beside them")
    parser.add_argument("--alone-seconds", type=float, default=30.0, help="--live-rate: the alone window")
    parser.add_argument("--gap", type=float, default=10.0, help="--live-rate: unmeasured s before a window")
    args = parser.parse_args()
    busy_count = args.busy if args.busy is not None else (0 if args.live_rate else 2)
    exit_on_sigterm()
    cfg = load_config()
    props = cfg.kafka.client_config()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    started = read_state(cfg) is None
    if started:
        subprocess.run([*KAPPA, "spark", "up", "--timeout", "900"], env=env, cwd=PROJECT_ROOT,
                       check=True, stdout=sys.stderr)
    status = attachable(env)
    idle_nice = (status.get("service") or {}).get("idle_nice", cfg.spark.service_nice)
    source = new_topic(props, PARTITIONS)
    loops: list[subprocess.Popen] = []
    result: dict[str, Any] = {}
    error = None
    try:
        produce(props, source, args.records, seed=7)
        loops = busy(busy_count)
        time.sleep(10)  # the load average starts to count them
        result = (live_windows(args, cfg, env, source, idle_nice) if args.live_rate
                  else replay_rounds(args, env, props, source, idle_nice))
    except Exception as exc:  # the runs done so far are still reported
        error = f"{type(exc).__name__}: {exc}"[-1000:]
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
        drop_topics(props, [source])
        if started:
            subprocess.run([*KAPPA, "spark", "down"], env=env, cwd=PROJECT_ROOT, check=False,
                           stdout=sys.stderr)
    print(json.dumps({"benchmark": "spark_service_nice", "records": args.records, "busy": busy_count,
                      "cores": os.cpu_count(), "spark_master": cfg.spark.master, "idle_nice": idle_nice,
                      "date": time.strftime("%Y-%m-%d"), "service": status.get("service"),
                      **({"live": result} if args.live_rate else result), "error": error},
                     indent=2))


if __name__ == "__main__":
    main()
