"""Benchmark: the streaming job (``run_stream``) against a hand-written confluent-kafka loop.

Starts a private embedded Kafka and Redis (or uses ``--bootstrap``/``--redis-port``), produces
``--records`` generated RSVPs (the end-to-end tests' fault mix: late, out-of-order, duplicate and
malformed lines) round-robin to a 3-partition topic, batched and lz4-compressed as the collector
writes rsvps.raw (``--input-codec``, default lz4), then
measures, in one run on the same topic:

* ``loop``: one process, one confluent-kafka consumer on the three partitions, calling per
  record the same plain-Python functions as the job's tasks (typed validation with exact
  reasons, the analyzed JSON record or the dead letter produced to a topic, every summary
  counted): the strongest fair baseline (no Spark, no Redis; bench/streaming_loop.py);
* ``job``: ``run_stream`` in replay mode (availableNow, ``--per-trigger`` offsets per batch,
  all sinks: Kafka outputs and the fenced Redis apply) on ``local[2]``, after an untimed replay
  of ``--warmup`` records (JVM warm-up). Sustained rate = rows of every batch but the first /
  their batch durations (plus their Redis apply when it is not in the background); steady-span
  rate = the same rows / the time from the second batch's start to the last Redis apply's end
  (gaps between batches included); run rate = records / the time from the first batch's start
  to the last Redis apply's end (every batch and Spark's work between batches, not the query's
  start); wall rate = records / the replay's wall time. The embedded broker answers a fetch with
  the whole rest of the partition, so the first batch reads (and spills) the whole backlog: the
  sustained and steady-span rates leave that read out, the run rate does not. ``--ab-apply``
  runs the job twice per round, with ``streaming.apply_in_background`` false and true;
* ``latency``: the job live (1 s trigger) while a paced producer sends ``--rate`` events/s for
  ``--seconds`` (after ``--settle`` seconds of the same rate, not counted). Latency of an event =
  the first time a 10 ms poller saw the Redis fence of its partition (written in the same
  fenced script call as the summary increments) beyond its offset, minus its produce time.
  Beside it, ``broker_round_trip`` probes the broker alone (one record produced with acks=all
  and fetched back every 100 ms, on a topic of its own: its stalls over 1 s with their times),
  and ``live_batches.slowest`` lists the slowest batches with their start time, phases and the
  tasks' largest phase times, to tell the job's delays from the broker's. ``to_analyzed``: Kafka
  timestamp of each source record to that of its record on rsvps.analyzed, tailed during the run.
  ``--retention-s`` sets the run's topics' ``retention.ms``: the embedded broker rewrites its
  whole state after writes, so at thousands of events/s its stalls grow with what it holds;
* ``rss``: the peak, sampled every 0.2 s, of the driver JVM plus every process under it (Python
  workers), and of this process (the driver's Python, which also runs the benchmark);
* between phases, the embedded broker is left to settle (the work it does after taking writes
  would otherwise land in the next phase); each phase's CPU is counted until then. The broker
  rewrites its whole state after writes, so that work grows with all it holds: each phase's
  outputs (and the warm-up's topics) are deleted after it, and every phase starts with the broker
  holding the same data (``broker_state_mb_before``).

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
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from statistics import median
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the bench's sibling modules

from streaming_cpu import RssSampler, cpu_seconds, load_avg, settle, with_cpu
from streaming_replay import replay, summary
from streaming_support import (
    PARTITIONS,
    broker_state_mb,
    drop_topics,
    exit_on_sigterm,
    job_config,
    new_topic,
    output_topics,
    produce,
)

from jobs.config.load import KappaConfig, load_config


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON result."""
    args = _parse(argv)
    exit_on_sigterm()
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
    from jobs.stack.embedded import EmbeddedStack

    stack = EmbeddedStack(cfg)
    try:
        stack.up(progress=lambda message: None)
        yield
    finally:
        stack.down(progress=lambda message: None)


@contextmanager
def private_source(records: int, prefix: str) -> Iterator[tuple[KappaConfig, str]]:
    """This benchmark's config on a private embedded stack, with a topic of ``records`` RSVPs.

    For the diagnostics beside it (streaming_tasks.py, streaming_broker_nice.py); the broker is
    not left to settle after the produce (``settle``).
    """
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        cfg = _config(_parse(["--records", str(records)]), Path(folder))
        with _embedded_stack(cfg, start=True):
            source = new_topic(cfg.kafka.client_config(), PARTITIONS)
            produce(cfg.kafka.client_config(), source, records, seed=1)
            yield cfg, source


def run(cfg: KappaConfig, args: argparse.Namespace) -> dict[str, Any]:
    """Produce, then measure the loop, the job (replay), the job's latency (live) and RSS."""
    load: dict[str, Any] = {"start": load_avg()}
    props = cfg.kafka.client_config()
    source = new_topic(props, PARTITIONS)
    produce_s = produce(props, source, args.records, seed=1, codec=args.input_codec)
    result: dict[str, Any] = {
        "benchmark": "streaming", "records": args.records, "per_trigger": args.per_trigger,
        "partitions": PARTITIONS, "spark_master": cfg.spark.master,
        "shuffle_partitions": cfg.spark.shuffle_partitions,
        "max_records_per_partition": cfg.streaming.max_records_per_partition,
        "task_slots": cfg.streaming.task_slots,
        "read_in_tasks": cfg.streaming.read_in_tasks,
        "prefetch_ranges": cfg.streaming.prefetch_ranges,
        "broker": "embedded noida-db" if cfg.kafka.embedded else cfg.kafka.bootstrap_servers,
        "input_codec": args.input_codec, "produce_s": round(produce_s, 2)}
    rss = RssSampler()
    rss.start()
    try:
        loops = []
        warm = new_topic(props, PARTITIONS)
        produce(props, warm, args.warmup, seed=2, codec=args.input_codec)
        result["broker_settle_after_produce_s"] = settle()
        began = time.monotonic()
        warm_cfg = job_config(cfg, warm)
        replay(warm_cfg, args.per_trigger)  # untimed: JVM start, JIT, Python workers
        result["spark_start_and_warmup_s"] = round(time.monotonic() - began, 2)
        drop_topics(props, [warm, *output_topics(warm_cfg)])
        load["after_warmup"] = load_avg()
        output = not args.no_kafka_output
        variants: dict[str, dict[str, Any]] = (
            {"sync_apply": {"apply_in_background": False}, "background_apply": {"apply_in_background": True}}
            if args.ab_apply else {"job": {}})
        jobs_by: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
        for round_index in range(args.repeats):
            outputs = [new_topic(props, PARTITIONS), new_topic(props, 1)]
            state = broker_state_mb(cfg)
            loops.append(with_cpu(partial(_loop, cfg, source, args.records, outputs, output=output),
                                  overhead=lambda: rss.cpu_s))
            loops[-1]["broker_state_mb_before"] = state
            drop_topics(props, outputs)
            names = list(variants) if round_index % 2 == 0 else list(reversed(variants))  # A/B, B/A
            for name in names:
                job_cfg = job_config(cfg, source, **variants[name])
                state = broker_state_mb(cfg)
                jobs_by[name].append(with_cpu(partial(replay, job_cfg, args.per_trigger, output=output),
                                              overhead=lambda: rss.cpu_s))
                jobs_by[name][-1]["broker_state_mb_before"] = state
                drop_topics(props, output_topics(job_cfg))
        load["after_throughput"] = load_avg()
        if args.breakdown:
            from streaming_breakdown import breakdown

            result["breakdown"] = breakdown(job_config(cfg, source), source, args.records, args.per_trigger,
                                            str(cfg.lake.checkpoint_root), cpu_seconds)
            load["after_breakdown"] = load_avg()
        loop_rate = median(x["rows_per_s"] for x in loops)
        summaries = {name: summary(runs, loops) for name, runs in jobs_by.items()}
        result["throughput"] = {"loop_rows_per_s": round(loop_rate),
                                "loop_cpu_us_per_event": median(x["cpu_us_per_event"] for x in loops)}
        if args.ab_apply:
            result["throughput"] |= {"by_variant": summaries, "loop_runs": loops,
                                     "job_runs": jobs_by}
        else:
            result["throughput"] |= summaries["job"] | {"loop_runs": loops, "job_runs": jobs_by["job"]}
        if not args.skip_latency:
            from streaming_latency import latency

            result["latency"] = latency(cfg, args)
            load["after_latency"] = load_avg()
    finally:
        rss.stop()
    result["rss_mb"] = rss.peaks()
    result["load_avg_1_5_15"] = load
    result["method"] = __doc__.split("\n\n")[1:3]
    result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                         "memory_gb": round(psutil.virtual_memory().total / 2**30, 1)}
    return result


# --- the hand-written loop (bench/streaming_loop.py) -----------------------------------------

def _loop(cfg: KappaConfig, source: str, records: int, outputs: list[str], output: bool = True
          ) -> dict[str, Any]:
    """Consume, validate, produce the analyzed/DLQ records, count: the job's work in one process."""
    from streaming_loop import run_loop

    analyzed, dlq = outputs
    return run_loop(cfg, source, PARTITIONS, records, analyzed, dlq, output=output)


# --- plumbing --------------------------------------------------------------------------------

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
    if args.max_records_per_partition:
        overrides["streaming.max_records_per_partition"] = args.max_records_per_partition
    if args.task_slots:
        overrides["streaming.task_slots"] = args.task_slots
    if args.prefetch is not None:
        overrides["streaming.prefetch_ranges"] = args.prefetch
    if args.records_through_jvm:
        overrides["streaming.read_in_tasks"] = False
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
    parser.add_argument("--retention-s", type=float,
                        help="retention.ms of the latency run's topics (default: the broker's); the "
                             "embedded broker rewrites all it holds after writes")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--breakdown", action="store_true",
                        help="also time the Spark pass with parts switched off (streaming_breakdown.py)")
    parser.add_argument("--max-records-per-partition", type=int,
                        help="streaming.max_records_per_partition (split ranges into more tasks)")
    parser.add_argument("--task-slots", type=int,
                        help="streaming.task_slots (a batch's ranges regrouped into at most N tasks)")
    parser.add_argument("--ab-apply", action="store_true",
                        help="each round runs the job twice, streaming.apply_in_background false and "
                             "true (alternating which goes first): by_variant in the result")
    parser.add_argument("--prefetch", action=argparse.BooleanOptionalAction,
                        help="streaming.prefetch_ranges (default: the config's, false)")
    parser.add_argument("--no-kafka-output", action="store_true",
                        help="neither the loop nor the job writes rsvps.analyzed / rsvps.dlq (the "
                             "embedded broker's work after writes then stays out of the comparison)")
    parser.add_argument("--records-through-jvm", action="store_true",
                        help="streaming.read_in_tasks=false: the source reads the records, which "
                             "cross into the JVM and back to the tasks (as with Spark's JVM connector)")
    parser.add_argument("--input-codec", default="lz4", choices=("lz4", "zstd", "gzip", "snappy", "none"),
                        help="compression.type of the input topic's producer (default: the collector's)")
    parser.add_argument("--shuffle-partitions", type=int, help="override spark.shuffle_partitions")
    parser.add_argument("--bootstrap", help="an existing Kafka (default: embedded Kafka and Redis)")
    parser.add_argument("--redis-port", type=int, default=6379, help="with --bootstrap")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
