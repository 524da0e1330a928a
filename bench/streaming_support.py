"""Plumbing of bench/streaming.py and its siblings: topics, input, the job's config."""

from __future__ import annotations

import json
import signal
import sys
import time
import uuid
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from streaming_cpu import settle

from jobs.collector.producer import producer_config as collector_producer_config
from jobs.config.load import KappaConfig
from pipelines.rsvp.generator import FaultMix, RsvpGenerator

PARTITIONS = 3
FAULTS = FaultMix(late=0.03, out_of_order=0.05, duplicates=0.03, malformed=0.01)
TOPIC_NAMES = ("source_topic", "analyzed_topic", "summaries_topic", "dlq_topic", "metrics_topic",
               "errors_topic")


def job_config(cfg: KappaConfig, source: str, topic_config: dict[str, str] | None = None,
               **streaming: Any) -> KappaConfig:
    props = cfg.kafka.client_config()
    name = uuid.uuid4().hex[:8]
    topics = {n: source if n == "source_topic" else new_topic(props, 1 if n in (
        "dlq_topic", "metrics_topic", "errors_topic") else PARTITIONS, topic_config) for n in TOPIC_NAMES}
    update = {**topics, "query_name": f"bench-{name}", "redis_prefix": f"bench{name}", **streaming}
    return cfg.model_copy(update={"streaming": cfg.streaming.model_copy(update=update)})


def output_topics(job_cfg: KappaConfig) -> list[str]:
    """The topics :func:`job_config` created for the job (all but the source)."""
    s = job_cfg.streaming
    return [getattr(s, n) for n in TOPIC_NAMES if n != "source_topic"]


def drop_topics(props: dict[str, str], topics: list[str]) -> None:
    """Delete ``topics``, then wait for the broker to settle.

    The embedded broker writes its whole state to one JSON file (``kafka.json``) after writes, so
    its work after each write grows with everything it holds. A phase run after another phase's
    outputs would pay for them: every phase starts with the broker holding the same topics.
    """
    admin = AdminClient(props)
    for future in admin.delete_topics(topics, operation_timeout=60).values():
        future.result(60)
    settle()


def broker_state_mb(cfg: KappaConfig) -> float | None:
    """The size of the embedded broker's state file (None: not embedded or not written yet)."""
    path = cfg.stack.data_dir / "kafka" / "kafka.json"
    try:
        return round(path.stat().st_size / 2**20, 1)
    except FileNotFoundError:
        return None


def produce(props: dict[str, str], topic: str, records: int, seed: int, start: int | None = None,
            codec: str = "lz4", distinct_events: bool = False) -> float:
    """Produce ``records`` generated RSVPs; the producer batches and compresses as the collector's
    (jobs/collector/producer.py), which writes the platform's rsvps.raw, unless ``codec`` says.

    ``distinct_events``: every valid RSVP gets its own event id (a real event site: nearly every
    RSVP is to another event), topics and cities as skewed as the generator makes them.
    """
    start_ms = start if start is not None else int(time.time() * 1000) - records * 20
    producer = Producer({**collector_producer_config(props), "compression.type": codec,
                         "queue.buffering.max.messages": 1_000_000})
    generated = RsvpGenerator(seed=seed, faults=FAULTS, start_ms=start_ms).generate(records)
    began = time.monotonic()
    for index, item in enumerate(generated):
        line = _own_event(item.line, index) if distinct_events else item.line
        while True:
            try:
                producer.produce(topic, line, str(index).encode(), index % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError("could not flush the input in 300 s")
    return time.monotonic() - began


def _own_event(line: bytes, index: int) -> bytes:
    try:
        record = json.loads(line)
        record["event"]["event_id"] = f"e{index:08d}"
    except (ValueError, TypeError, KeyError):
        return line  # a malformed line stays as it is
    return json.dumps(record, separators=(",", ":")).encode()


def new_topic(props: dict[str, str], partitions: int, config: dict[str, str] | None = None) -> str:
    name = f"bench.{uuid.uuid4().hex[:10]}"
    admin = AdminClient(props)  # kept alive until the topic exists
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)
    return name


def percentiles(seconds: list[float], digits: int = 0) -> dict[str, Any]:
    """Count, p50, p90, p99 and max of latencies in seconds, as ms (``digits`` after the point)."""
    ordered = sorted(seconds)

    def ms(value: float) -> float:
        return round(value * 1000, digits) if digits else round(value * 1000)

    def pick(q: float) -> float | None:
        return ms(ordered[min(len(ordered) - 1, int(q * len(ordered)))]) if ordered else None

    return {"events": len(ordered), "p50_ms": pick(0.5), "p90_ms": pick(0.9), "p99_ms": pick(0.99),
            "max_ms": ms(ordered[-1]) if ordered else None}


def exit_on_sigterm() -> None:
    """Make SIGTERM (``timeout``, ``kill``) unwind like Ctrl-C: the benchmark's ``finally`` blocks
    then stop the services it started, which Python's default (die at once) would leave running."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
