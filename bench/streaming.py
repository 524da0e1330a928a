"""Benchmark: the streaming job (``run_stream``) against a hand-written confluent-kafka loop.

Starts a private embedded Kafka and Redis (or uses ``--bootstrap``/``--redis-port``), produces
``--records`` generated RSVPs (the end-to-end tests' fault mix: late, out-of-order, duplicate and
malformed lines) round-robin to a 3-partition topic, then measures, in one run on the same topic:

* ``loop``: one process, one confluent-kafka consumer on the three partitions, calling per
  record the same plain-Python functions as the job's tasks (typed validation with exact
  reasons, the analyzed JSON record or the dead letter produced to a topic, every summary
  counted): the strongest fair baseline (no Spark, no Redis; bench/streaming_loop.py);
* ``job``: ``run_stream`` in replay mode (availableNow, ``--per-trigger`` offsets per batch,
  all sinks: Kafka outputs and the fenced Redis apply) on ``local[2]``, after an untimed replay
  of ``--warmup`` records (JVM warm-up). Sustained rate = rows of every batch but the first /
  their batch durations; wall rate = records / the replay's wall time;
* ``latency``: the job live (1 s trigger) while a paced producer sends ``--rate`` events/s for
  ``--seconds`` (after ``--settle`` seconds of the same rate, not counted). Latency of an event =
  the first time a 10 ms poller saw the Redis fence of its partition (written in the same
  ``MULTI/EXEC`` as the summary increments) beyond its offset, minus its produce time;
* ``rss``: the peak, sampled every 0.2 s, of the driver JVM plus every process under it (Python
  workers), and of this process (the driver's Python, which also runs the benchmark).

Prints one JSON object. Never run as a timed test.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/streaming.py --records 300000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from statistics import median
from typing import Any

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from jobs.collector.generator import FaultMix, RsvpGenerator
from jobs.common.config import KappaConfig, load_config
from jobs.common.kafka.client import producer_config

PARTITIONS = 3
FAULTS = FaultMix(late=0.03, out_of_order=0.05, duplicates=0.03, malformed=0.01)
TOPIC_NAMES = ("source_topic", "analyzed_topic", "summaries_topic", "dlq_topic", "metrics_topic",
               "errors_topic")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON result."""
    args = _parse(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with tempfile.TemporaryDirectory(prefix="kappa-bench-stream-") as folder:
        cfg = _config(args, Path(folder))
        with _embedded_stack(cfg, start=args.bootstrap is None):
            result = run(cfg, args)
    print(json.dumps(result, indent=2))
    return 0


@contextmanager
def _embedded_stack(cfg: KappaConfig, start: bool) -> Iterator[None]:
    """The private embedded Kafka and Redis of the run, stopped (by pid) however it ends."""
    if not start:
        yield
        return
    from jobs.common.stack import EmbeddedStack

    stack = EmbeddedStack(cfg)
    try:
        stack.up(progress=lambda message: None)
        yield
    finally:
        stack.down(progress=lambda message: None)


def run(cfg: KappaConfig, args: argparse.Namespace) -> dict[str, Any]:
    """Produce, then measure the loop, the job (replay), the job's latency (live) and RSS."""
    load: dict[str, Any] = {"start": _load()}
    props = cfg.kafka.client_config()
    source = _topic(props, PARTITIONS)
    produce_s = _produce(props, source, args.records, seed=1)
    result: dict[str, Any] = {
        "benchmark": "streaming", "records": args.records, "per_trigger": args.per_trigger,
        "partitions": PARTITIONS, "spark_master": cfg.spark.master,
        "shuffle_partitions": cfg.spark.shuffle_partitions,
        "broker": "embedded noida-db" if cfg.kafka.embedded else cfg.kafka.bootstrap_servers,
        "produce_s": round(produce_s, 2)}
    rss = _RssSampler()
    rss.start()
    try:
        loops = []
        jobs = []
        warm = _topic(props, PARTITIONS)
        _produce(props, warm, args.warmup, seed=2)
        began = time.monotonic()
        _replay(cfg, warm, args.per_trigger)  # untimed: JVM start, JIT, Python workers
        result["spark_start_and_warmup_s"] = round(time.monotonic() - began, 2)
        load["after_warmup"] = _load()
        for _ in range(args.repeats):
            loops.append(_with_cpu(lambda: _loop(cfg, source, args.records)))
            jobs.append(_with_cpu(lambda: _replay(cfg, source, args.per_trigger)))
        load["after_throughput"] = _load()
        if args.breakdown:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from streaming_breakdown import breakdown

            result["breakdown"] = breakdown(_job_cfg(cfg, source), source, args.records, args.per_trigger,
                                            str(cfg.lake.checkpoint_root), _cpu_seconds)
            load["after_breakdown"] = _load()
        loop_rate = median(x["rows_per_s"] for x in loops)
        sustained = median(x["sustained_rows_per_s"] for x in jobs)
        result["throughput"] = {
            "loop_rows_per_s": round(loop_rate), "job_sustained_rows_per_s": round(sustained),
            "job_wall_rows_per_s": round(median(x["wall_rows_per_s"] for x in jobs)),
            "job_vs_loop": round(sustained / loop_rate, 2),
            "loop_cpu_us_per_event": median(x["cpu_us_per_event"] for x in loops),
            "job_cpu_us_per_event": median(x["cpu_us_per_event"] for x in jobs),
            "loop_runs": loops, "job_runs": jobs}
        if not args.skip_latency:
            result["latency"] = _latency(cfg, args)
            load["after_latency"] = _load()
    finally:
        rss.stop()
    result["rss_mb"] = rss.peaks()
    result["load_avg_1_5_15"] = load
    result["method"] = __doc__.split("\n\n")[1:3]
    result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                         "memory_gb": round(psutil.virtual_memory().total / 2**30, 1)}
    return result


# --- the job ---------------------------------------------------------------------------------

def _job_cfg(cfg: KappaConfig, source: str, **streaming: Any) -> KappaConfig:
    props = cfg.kafka.client_config()
    name = uuid.uuid4().hex[:8]
    topics = {n: source if n == "source_topic" else _topic(props, 1 if n in (
        "dlq_topic", "metrics_topic", "errors_topic") else PARTITIONS) for n in TOPIC_NAMES}
    update = {**topics, "query_name": f"bench-{name}", "redis_prefix": f"bench{name}", **streaming}
    return cfg.model_copy(update={"streaming": cfg.streaming.model_copy(update=update)})


def _replay(cfg: KappaConfig, source: str, per_trigger: int) -> dict[str, Any]:
    from jobs.streaming.job import RunSpec, run_stream
    from jobs.streaming.redis_sink import connect

    job_cfg = _job_cfg(cfg, source)
    spec = RunSpec(mode="replay", starting="earliest", ending="latest",
                   max_offsets_per_trigger=per_trigger, fresh=True)
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
    seconds = sum(b["batch_duration_ms"] for b in steady) / 1000
    phases: dict[str, list[int]] = defaultdict(list)
    for batch in steady:
        for name, ms in batch.get("phases_ms", {}).items():
            phases[name].append(ms)
    return {"records": report.records_read, "wall_s": round(wall, 2),
            "wall_rows_per_s": round(report.records_read / wall),
            "sustained_rows_per_s": round(rows / seconds) if seconds else 0,
            "batches": len(batches), "batch_ms": [b["batch_duration_ms"] for b in batches],
            "phases_ms_median": {k: median(v) for k, v in phases.items()},
            "written": report.written, "load_avg_1m": round(os.getloadavg()[0], 2)}


def _latency(cfg: KappaConfig, args: argparse.Namespace) -> dict[str, Any]:
    """Live job, paced producer, fence poller: produce-to-visible-in-Redis per event."""
    from jobs.streaming.job import RunSpec, run_stream
    from jobs.streaming.redis_sink import connect

    props = cfg.kafka.client_config()
    source = _topic(props, PARTITIONS)
    job_cfg = _job_cfg(cfg, source, trigger_s=1.0)
    stop = threading.Event()
    errors: list[BaseException] = []

    def job() -> None:
        try:
            run_stream(job_cfg, RunSpec(mode="live", starting="latest"), progress=lambda m: None,
                       stop=stop)
        except BaseException as exc:  # reported in the result
            errors.append(exc)

    runner = threading.Thread(target=job, daemon=True)
    runner.start()
    client = connect(job_cfg)
    fence_key = f"{job_cfg.streaming.redis_prefix}:fence:summaries"
    deadline = time.monotonic() + 300
    while client.hget(fence_key, "batch_id") is None and time.monotonic() < deadline:
        _produce(props, source, 30, seed=3)  # until the query has applied a batch
        time.sleep(1)
    samples: list[tuple[float, dict[int, int]]] = []
    polling = threading.Event()

    def poll() -> None:
        while not polling.is_set():
            raw = client.hgetall(fence_key)
            now = time.time()
            samples.append((now, {int(k.rsplit(":", 1)[1]): int(v) for k, v in raw.items()
                                  if k.startswith(f"{source}:")}))
            time.sleep(0.01)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    sent = _paced(props, source, args.rate, args.settle + args.seconds)
    time.sleep(5)
    deadline = time.monotonic() + 60
    last = {p: max((o for q, o, _ in sent if q == p), default=-1) for p in range(PARTITIONS)}
    while time.monotonic() < deadline and any(
            (samples[-1][1].get(p, 0) if samples else 0) <= o for p, o in last.items() if o >= 0):
        time.sleep(0.2)
    polling.set()
    poller.join()
    stop.set()
    runner.join(120)
    client.close()
    if not sent:
        return {"error": "no event was acknowledged by the broker", "job_error":
                repr(errors[0])[:500] if errors else None}
    first = min(t for _, _, t in sent) + args.settle
    measured = [(p, o, t) for p, o, t in sent if t >= first]
    latencies = _visible(measured, samples)
    latencies.sort()

    def pick(q: float) -> int | None:
        return (round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000)
                if latencies else None)

    return {"rate_per_s": args.rate, "seconds": args.seconds, "settle_s": args.settle,
            "trigger_s": 1.0, "events": len(measured), "seen": len(latencies),
            "p50_ms": pick(0.50), "p90_ms": pick(0.90), "p99_ms": pick(0.99),
            "max_ms": round(latencies[-1] * 1000) if latencies else None,
            "job_error": repr(errors[0])[:500] if errors else None}


def _visible(events: list[tuple[int, int, float]], samples: list[tuple[float, dict[int, int]]]
             ) -> list[float]:
    """Per event: the first sample time whose fence of its partition is past its offset, minus t."""
    out: list[float] = []
    for partition in range(PARTITIONS):
        mine = sorted((o, t) for p, o, t in events if p == partition)
        index = 0
        for when, fence in samples:
            while index < len(mine) and mine[index][0] < fence.get(partition, 0):
                out.append(when - mine[index][1])
                index += 1
    return out


def _paced(props: dict[str, str], topic: str, rate: float, seconds: float
           ) -> list[tuple[int, int, float]]:
    """Produce generated RSVPs at ``rate``/s; return (partition, offset, produce time) each."""
    # every delivery reported: the sink's config reports only failures, which left this empty
    producer = Producer({**producer_config(props), "delivery.report.only.error": False})
    sent: list[tuple[int, int, float]] = []
    lines = (g.line for g in RsvpGenerator(seed=4, faults=FAULTS,
                                           start_ms=int(time.time() * 1000)).generate())
    began = time.time()
    index = 0
    while True:
        now = time.time()
        if now - began >= seconds:
            break
        due = int((now - began) * rate)
        while index < due:
            producer.produce(topic, next(lines), str(index).encode(), index % PARTITIONS,
                             on_delivery=_delivered(sent, time.time()))
            index += 1
        producer.poll(0)
        time.sleep(0.005)
    producer.flush(30)
    return sent


def _delivered(sent: list[tuple[int, int, float]], stamp: float):
    def report(err, msg) -> None:
        if err is None:
            sent.append((msg.partition(), msg.offset(), stamp))
    return report


# --- the hand-written loop (bench/streaming_loop.py) -----------------------------------------

def _loop(cfg: KappaConfig, source: str, records: int) -> dict[str, Any]:
    """Consume, validate, produce the analyzed/DLQ records, count: the job's work in one process."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from streaming_loop import run_loop

    props = cfg.kafka.client_config()
    return run_loop(cfg, source, PARTITIONS, records, _topic(props, PARTITIONS), _topic(props, 1))


def _cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and every descendant, reaped ones included."""
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _with_cpu(run: Any) -> dict[str, Any]:
    """``run()``'s result plus the CPU it (and the broker, a descendant) used per event."""
    before = _cpu_seconds()
    result = run()
    cpu = _cpu_seconds() - before
    result |= {"cpu_s": round(cpu, 1), "cpu_us_per_event": round(cpu / result["records"] * 1e6, 1)}
    return result


# --- plumbing --------------------------------------------------------------------------------

class _RssSampler:
    """Peak RSS of the driver JVM + its descendants, and of this process, sampled every 0.2 s."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.peak = {"jvm_and_python_workers": 0, "driver_python_and_bench": 0, "total": 0}
        self.workers_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        """Begin sampling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                tree = 0
                for child in self.me.children():
                    if child.name() != "java":
                        continue
                    tree += child.memory_info().rss
                    for sub in child.children(recursive=True):
                        try:
                            tree += sub.memory_info().rss
                        except psutil.NoSuchProcess:
                            pass
                mine = self.me.memory_info().rss
                for name, value in (("jvm_and_python_workers", tree), ("driver_python_and_bench", mine),
                                    ("total", tree + mine)):
                    self.peak[name] = max(self.peak[name], value)
            except psutil.Error:
                pass
            time.sleep(0.2)

    def peaks(self) -> dict[str, int]:
        """Peak MiB per group."""
        return {name: round(value / 2**20) for name, value in self.peak.items()}


def _produce(props: dict[str, str], topic: str, records: int, seed: int, start: int | None = None
             ) -> float:
    start_ms = start if start is not None else int(time.time() * 1000) - records * 20
    producer = Producer({**props, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000})
    generated = RsvpGenerator(seed=seed, faults=FAULTS, start_ms=start_ms).generate(records)
    began = time.monotonic()
    for index, item in enumerate(generated):
        while True:
            try:
                producer.produce(topic, item.line, str(index).encode(), index % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError("could not flush the input in 300 s")
    return time.monotonic() - began


def _topic(props: dict[str, str], partitions: int) -> str:
    name = f"bench.{uuid.uuid4().hex[:10]}"
    admin = AdminClient(props)  # kept alive until the topic exists
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _config(args: argparse.Namespace, folder: Path) -> KappaConfig:
    def free_port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    overrides: dict[str, Any] = {"spark.ui_enabled": False, "spark.master": "local[2]",
                                 "stack.data_dir": str(folder / "stack"),
                                 "lake.checkpoint_root": str(folder / "checkpoints")}
    if args.shuffle_partitions:
        overrides["spark.shuffle_partitions"] = args.shuffle_partitions
    if args.bootstrap:
        overrides |= {"kafka.bootstrap_servers": args.bootstrap, "kafka.embedded": False,
                      "redis.embedded": False, "redis.port": args.redis_port}
    else:
        overrides |= {"kafka.bootstrap_servers": f"127.0.0.1:{free_port()}", "redis.port": free_port(),
                      "redis.embedded": True}
    return load_config("local", overrides=overrides, environ={})


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--per-trigger", type=int, default=100_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--warmup", type=int, default=50_000, help="records of the untimed replay")
    parser.add_argument("--repeats", type=int, default=1, help="loop + replay rounds (median)")
    parser.add_argument("--rate", type=float, default=2000.0, help="events/s of the latency run")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds of the latency run")
    parser.add_argument("--settle", type=float, default=10.0, help="unmeasured seconds before those")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--breakdown", action="store_true",
                        help="also time the Spark pass with parts switched off (streaming_breakdown.py)")
    parser.add_argument("--shuffle-partitions", type=int, help="override spark.shuffle_partitions")
    parser.add_argument("--bootstrap", help="an existing Kafka (default: embedded Kafka and Redis)")
    parser.add_argument("--redis-port", type=int, default=6379, help="with --bootstrap")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
