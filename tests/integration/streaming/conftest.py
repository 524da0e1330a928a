"""Fixtures of the streaming job's tests: isolated topics, Redis prefix and checkpoints per test."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator

import pytest
from confluent_kafka import Producer

from jobs.config.load import KappaConfig
from jobs.streaming.redis_sink import RedisSummarySink


@pytest.fixture()
def stream_cfg(stack: KappaConfig, topic_factory: Callable[..., str], tmp_path) -> KappaConfig:
    """The session's config with this test's own topics, Redis prefix and checkpoint root."""
    name = uuid.uuid4().hex[:8]
    topics = {
        "source_topic": topic_factory(3, "raw"),
        "analyzed_topic": topic_factory(3, "analyzed"),
        "summaries_topic": topic_factory(3, "summaries"),
        "dlq_topic": topic_factory(1, "dlq"),
        "metrics_topic": topic_factory(1, "metrics"),
        "errors_topic": topic_factory(1, "errors"),
    }
    streaming = stack.streaming.model_copy(update={
        **topics, "query_name": f"q-{name}", "redis_prefix": f"t{name}", "trigger_s": 0.5})
    lake = stack.lake.model_copy(update={"checkpoint_root": str(tmp_path / "checkpoints")})
    return stack.model_copy(update={"streaming": streaming, "lake": lake})


@pytest.fixture()
def sink(stack: KappaConfig) -> Iterator[RedisSummarySink]:
    """A summary sink on the session's Redis under this test's own prefix (its keys removed after)."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    cfg = stack.model_copy(update={"streaming": stack.streaming.model_copy(update={"redis_prefix": prefix})})
    sink = RedisSummarySink(cfg)
    sink.setup()
    try:
        yield sink
    finally:
        keys = list(sink.client.scan_iter(f"{prefix}:*"))
        if keys:
            sink.client.delete(*keys)
        sink.close()


def produce(cfg: KappaConfig, topic: str, lines: Iterable[bytes], partitions: int = 3) -> int:
    """Produce lines round-robin over the partitions (key = index); return how many."""
    producer = Producer(cfg.kafka.client_config() | {"linger.ms": 5})
    count = 0
    for index, line in enumerate(lines):
        producer.produce(topic, value=line, key=str(index).encode(), partition=index % partitions)
        count += 1
        if count % 10000 == 0:
            producer.flush(30)
    assert producer.flush(30) == 0
    return count
