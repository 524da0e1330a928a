"""Event -> Redis latency of the live job (bench/streaming.py ``latency``)."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import threading
import time
from array import array
from itertools import pairwise
from statistics import median
from typing import Any

from confluent_kafka import Producer
from streaming_cpu import Sampler
from streaming_support import FAULTS, PARTITIONS, job_config, new_topic, percentiles, produce

from jobs.config.load import KappaConfig
from jobs.kafka.client import producer_config
from jobs.streaming.fence_fields import parse_fence
from pipelines.rsvp.generator import RsvpGenerator


def latency(cfg: KappaConfig, args: argparse.Namespace) -> dict[str, Any]:
    """Live job, paced producer, fence poller: produce-to-visible-in-Redis per event."""
    from jobs.streaming.job import RunSpec, run_stream
    from jobs.streaming.redis_sink import connect

    props = cfg.kafka.client_config()
    topic_config = {} if args.retention_s is None else {"retention.ms": str(int(args.retention_s * 1000))}
    source = new_topic(props, PARTITIONS, topic_config)
    job_cfg = job_config(cfg, source, topic_config, trigger_s=1.0)
    stop = threading.Event()
    errors: list[BaseException] = []

    def job() -> None:
        try:
            run_stream(job_cfg, RunSpec(mode="live", starting="earliest"), progress=lambda m: None,
                       stop=stop)
        except BaseException as exc:  # reported in the result
            errors.append(exc)

    runner = threading.Thread(target=job, daemon=True)
    runner.start()
    client = connect(job_cfg)
    fence_key = f"{job_cfg.streaming.redis_prefix}:fence:summaries"
    deadline = time.monotonic() + 300
    while client.hget(fence_key, "batch_id") is None and time.monotonic() < deadline:
        produce(props, source, 30, seed=3)  # until the query has applied a batch
        time.sleep(1)
    samples: list[tuple[float, dict[int, int]]] = []
    polling = threading.Event()

    def poll() -> None:
        while not polling.is_set():
            raw = client.hgetall(fence_key)
            now = time.time()
            samples.append((now, fence_offsets(raw, source)))
            time.sleep(0.01)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    probe = BrokerProbe(props)
    probe.start()
    tail = AnalyzedTail(props, job_cfg.streaming.analyzed_topic)
    tail.start()
    sent = _paced(props, source, args.rate, args.settle + args.seconds)
    probe.stop()
    time.sleep(5)
    deadline = time.monotonic() + 60
    last = {p: max((o for q, o, _ in sent if q == p), default=-1) for p in range(PARTITIONS)}
    while time.monotonic() < deadline and any(
            (samples[-1][1].get(p, 0) if samples else 0) <= o for p, o in last.items() if o >= 0):
        time.sleep(0.2)
    polling.set()
    poller.join()
    first = min((t for _, _, t in sent), default=time.time()) + args.settle
    analyzed = tail.result(int(first * 1000))
    stop.set()
    runner.join(120)
    batches = _live_batches(client, job_cfg)
    client.close()
    if not sent:
        return {"error": "no event was acknowledged by the broker", "job_error":
                repr(errors[0])[:500] if errors else None}
    measured = [(p, o, t) for p, o, t in sent if t >= first]
    at = percentiles(_visible(measured, samples))
    return {"rate_per_s": args.rate, "seconds": args.seconds, "settle_s": args.settle,
            "topic_retention_s": args.retention_s,
            "trigger_s": 1.0, "events": len(measured), "seen": at["events"],
            "p50_ms": at["p50_ms"], "p90_ms": at["p90_ms"], "p99_ms": at["p99_ms"], "max_ms": at["max_ms"],
            "to_analyzed": analyzed, "broker_round_trip": probe.summary(),
            "live_batches": batches, "job_error": repr(errors[0])[:500] if errors else None}


class AnalyzedTail:
    """A process of its own tailing rsvps.analyzed from its start during the run: per record, its
    Kafka timestamp (written by the job's tasks) minus its source record's (``kafka_timestamp_ms``
    in it). Tailed live, not read at the end, so that records a short retention deletes are
    counted; a process, so that its parsing does not take the GIL from the job's driver here."""

    def __init__(self, props: dict[str, str], topic: str) -> None:
        spawn = multiprocessing.get_context("spawn")   # not a fork of a process running a JVM's driver
        self._stop, self._since, self._out = spawn.Event(), spawn.Value("d", 0.0), spawn.Queue()
        self._process = spawn.Process(target=_tail, daemon=True, args=(
            props, topic, self._stop, self._since, self._out))

    def start(self) -> None:
        self._process.start()

    def result(self, since_ms: int) -> dict[str, Any]:
        """Stop after reading to the end; percentiles of the records whose source is from ``since_ms``."""
        self._since.value = since_ms
        self._stop.set()
        try:
            return self._out.get(timeout=180)
        finally:
            self._process.join(30)


def _tail(props: dict[str, str], topic: str, stop: Any, since: Any, out: Any) -> None:
    """Read ``topic`` in bursts, paused 0.5 s between them: the embedded broker answers an idle
    fetch at once, so a consumer fetching without pause would keep it busy (and the job with it)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({**props, "group.id": f"bench-{time.time_ns()}", "enable.auto.commit": False,
                         "fetch.max.bytes": 2_000_000_000, "receive.message.max.bytes": 2_147_483_647})
    parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
    consumer.assign(parts)
    source, delays, read, next_offset = array("q"), array("q"), 0, dict.fromkeys(range(PARTITIONS), 0)
    ends: dict[int, int] | None = None
    deadline = time.monotonic() + 10**6
    while True:
        if ends is None and stop.is_set():   # read on to the end offsets as they are now
            ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                    for p in range(PARTITIONS)}
            deadline = time.monotonic() + 120
        if ends is not None and (all(next_offset[p] >= end for p, end in ends.items())
                                 or time.monotonic() > deadline):
            break
        consumer.resume(parts)
        while messages := consumer.consume(10_000, timeout=0.2):
            for msg in messages:
                if msg.error():
                    continue
                read += 1
                next_offset[msg.partition()] = msg.offset() + 1
                value = msg.value()
                at = value.find(b'"kafka_timestamp_ms":')
                stamp = value[at + 21:value.find(b",", at)].strip() if at >= 0 else b""
                if stamp.isdigit():
                    source.append(int(stamp))
                    delays.append(msg.timestamp()[1] - int(stamp))
        consumer.pause(parts)
        time.sleep(0.5)
    consumer.close()
    since_ms = since.value
    kept = sorted(d for s, d in zip(source, delays, strict=True) if s >= since_ms)
    at_q = {q: kept[min(len(kept) - 1, int(q * len(kept)))] if kept else None for q in (0.5, 0.9, 0.99)}
    out.put({"records_read": read, "end_offsets": ends, "records": len(kept),
             "p50_ms": at_q[0.5], "p90_ms": at_q[0.9], "p99_ms": at_q[0.99],
             "max_ms": kept[-1] if kept else None})


def fence_offsets(raw: dict[str, str], source: str) -> dict[int, int]:
    """The fence hash's next offset per partition of ``source`` (its other fields left out)."""
    return {partition: offset for (topic, partition), offset in parse_fence(raw).items() if topic == source}


def _live_batches(client: Any, cfg: KappaConfig) -> dict[str, Any]:
    """Median duration and phases of the live query's batches with input (its metrics history)."""
    history = [json.loads(m) for m in client.lrange(
        f"{cfg.streaming.redis_prefix}:metrics:{cfg.streaming.query_name}:history", 0, -1)]
    busy = [b for b in history if b["input_rows"]]
    if not busy:
        return {}
    phases: dict[str, list[int]] = {}
    for batch in busy:
        for name, ms in batch.get("phases_ms", {}).items():
            phases.setdefault(name, []).append(ms)
    timeline = [{"batch_id": b["batch_id"], "rows": b["input_rows"],
                 "start_ms": b["emitted_ms"] - b["batch_duration_ms"],
                 "pass_ms": b["batch_duration_ms"], "phases_ms": b.get("phases_ms"),
                 "tasks_max_ms": (b.get("tasks") or {}).get("max_ms"),
                 "apply_ms": b.get("apply_ms"), "applied_after_pass_ms": b["applied_ms"] - b["emitted_ms"]}
                for b in sorted(busy, key=lambda b: b["batch_id"]) if "applied_ms" in b]
    for before, batch in pairwise(timeline):
        batch["gap_ms"] = batch["start_ms"] - (before["start_ms"] + before["pass_ms"])
    slowest = sorted(timeline, key=lambda b: -(b["pass_ms"] + b["applied_after_pass_ms"]
                                                + b.get("gap_ms", 0)))
    return {"batches": len(busy), "rows_median": median(b["input_rows"] for b in busy),
            "slowest": slowest[:6],
            "duration_ms_median": median(b["batch_duration_ms"] for b in busy),
            "duration_ms_max": max(b["batch_duration_ms"] for b in busy),
            "phases_ms_median": {name: median(values) for name, values in phases.items()}}


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


def _paced(props: dict[str, str], topic: str, rate: float, seconds: float,
           stop: threading.Event | None = None, sent: list[tuple[int, int, float]] | None = None,
           ) -> list[tuple[int, int, float]]:
    """Produce generated RSVPs at ``rate``/s for ``seconds`` (or until ``stop``); return
    (partition, offset, produce time) each (appended to ``sent`` as they are acknowledged)."""
    # every delivery reported: the sink's config reports only failures, which left this empty
    producer = Producer({**producer_config(props), "delivery.report.only.error": False})
    sent = [] if sent is None else sent
    # event times follow the wall clock: at the generator's default pace (50/s) a faster producer
    # would run ahead of it, and past streaming.future_skew_s the job dead-letters every record
    lines = (g.line for g in RsvpGenerator(seed=4, faults=FAULTS, start_ms=int(time.time() * 1000),
                                           events_per_second=rate).generate())
    began = time.time()
    index = 0
    while True:
        now = time.time()
        if now - began >= seconds or (stop is not None and stop.is_set()):
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


class BrokerProbe(Sampler):
    """The broker alone, beside the job: one record produced (acks=all) and fetched back every
    100 ms, on a topic of its own; the round trip's percentiles and its stalls (over 1 s, with
    their epoch ms, to set beside the batches' ``start_ms``)."""

    def __init__(self, props: dict[str, str]) -> None:
        self.props, self.topic = props, new_topic(props, 1)
        self.trips: list[tuple[int, float]] = []
        super().__init__()

    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        producer = Producer({**producer_config(self.props), "linger.ms": 0})
        consumer = Consumer({**self.props, "group.id": f"probe-{time.time_ns()}",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(self.topic, 0, 0)])
        while not self._stop.is_set():
            began, token = time.time(), str(time.time_ns()).encode()
            producer.produce(self.topic, token)
            producer.flush(60)
            deadline = began + 60
            while time.time() < deadline:
                msg = consumer.poll(0.05)
                if msg is not None and not msg.error() and msg.value() == token:
                    break
            self.trips.append((int(began * 1000), time.time() - began))
            time.sleep(0.1)
        consumer.close()

    def summary(self) -> dict[str, Any]:
        return percentiles([t for _, t in self.trips]) | {
            "stalls_over_1s": [{"start_ms": ms, "ms": round(t * 1000)} for ms, t in self.trips if t > 1]}
