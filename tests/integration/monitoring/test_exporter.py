"""The exporter reads the job's records in the real Redis and the end offsets in the real Kafka."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

from confluent_kafka import Producer
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from jobs.monitoring.exporter import KappaCollector


def scrape(cfg) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    collector = KappaCollector(cfg)
    registry.register(collector)
    try:
        text = generate_latest(registry).decode()
    finally:
        collector.close()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_state_lag_and_totals_from_redis_and_kafka(stack, redis_client, kafka_props, topic_factory):
    prefix = f"mon{uuid.uuid4().hex[:8]}"
    cfg = stack.model_copy(update={"streaming": stack.streaming.model_copy(update={"redis_prefix": prefix})})
    topic = topic_factory(partitions=2)
    producer = Producer(kafka_props)
    for _ in range(7):
        producer.produce(topic, value=b"x", partition=0)
    for _ in range(3):
        producer.produce(topic, value=b"x", partition=1)
    assert producer.flush(15) == 0
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        redis_client.hset(f"{prefix}:fence:summaries", mapping={
            f"{topic}:0": 5, f"{topic}:0:stream_ms": 1_700_000_000_000, f"{topic}:1": 3,
            f"{topic}:1:stream_ms": "", "batch_id": 4, "updated_ms": 1_700_000_001_000})
        redis_client.hset(f"{prefix}:metrics:q-alive:status", mapping={"state": "running", "pid": alive.pid})
        redis_client.hset(f"{prefix}:metrics:q-dead:status", mapping={"state": "running", "pid": dead.pid})
        redis_client.hset(f"{prefix}:metrics:q-alive",
                          mapping={"batch_id": 4, "emitted_ms": 1_700_000_002_000})
        redis_client.lpush(f"{prefix}:metrics:q-alive:history",
                           *[json.dumps({"batch_duration_ms": ms}) for ms in (100, 200, 300, 400, 5000)])
        redis_client.hset(f"{prefix}:totals", mapping={"input": 10, "valid": 8, "dlq": 2, "late": 1})
        got = scrape(cfg)
    finally:
        alive.kill()
        alive.wait()
        for key in redis_client.scan_iter(match=f"{prefix}:*"):
            redis_client.delete(key)
    assert got[("kappa_stream_up", (("query", "q-alive"),))] == 1
    assert got[("kappa_stream_up", (("query", "q-dead"),))] == 0
    assert got[("kappa_stream_state", (("query", "q-dead"), ("state", "running")))] == 1
    assert got[("kappa_stream_lag_records", (("partition", "0"), ("topic", topic)))] == 2
    assert got[("kappa_stream_lag_records", (("partition", "1"), ("topic", topic)))] == 0
    assert got[("kappa_kafka_end_offset", (("partition", "0"), ("topic", topic)))] == 7
    assert got[("kappa_stream_time_seconds", (("partition", "0"), ("topic", topic)))] == 1_700_000_000
    assert ("kappa_stream_time_seconds", (("partition", "1"), ("topic", topic))) not in got
    assert got[("kappa_stream_dead_letter_records_total", ())] == 2
    assert got[("kappa_stream_last_batch_timestamp_seconds", (("query", "q-alive"),))] == 1_700_000_002
    duration = "kappa_stream_recent_batch_duration_seconds"
    assert got[(duration, (("quantile", "0.5"), ("query", "q-alive")))] == 0.3
    assert got[(duration, (("quantile", "0.99"), ("query", "q-alive")))] == 5.0
    assert got[("kappa_exporter_source_up", (("source", "kafka"),))] == 1
    assert got[("kappa_serve_max_clients", ())] == cfg.serve.max_clients


def test_sources_down_are_metrics_not_errors(stack):
    cfg = stack.model_copy(update={"redis": stack.redis.model_copy(update={"port": 1})})
    began = time.monotonic()
    got = scrape(cfg)
    assert time.monotonic() - began < 5  # well inside Prometheus's default 10 s scrape timeout
    assert got[("kappa_exporter_source_up", (("source", "redis"),))] == 0


def test_retention_headroom_from_the_record_at_the_fence(stack, redis_client, kafka_props):
    from confluent_kafka.admin import AdminClient, NewTopic

    prefix = f"mon{uuid.uuid4().hex[:8]}"
    cfg = stack.model_copy(update={"streaming": stack.streaming.model_copy(update={"redis_prefix": prefix})})
    topic = f"ret.{uuid.uuid4().hex[:10]}"
    admin = AdminClient(kafka_props)
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "86400000"})])[topic].result(15)
    now_ms = int(time.time() * 1000)
    producer = Producer(kafka_props)
    for age_s in (7200, 3600, 60):  # offsets 0, 1, 2: the fence at 1 leaves the 1-hour-old record
        producer.produce(topic, value=b"x", partition=0, timestamp=now_ms - age_s * 1000)
    assert producer.flush(15) == 0
    try:
        redis_client.hset(f"{prefix}:fence:summaries", mapping={f"{topic}:0": 1})
        got = scrape(cfg)
    finally:
        redis_client.delete(f"{prefix}:fence:summaries")
        admin.delete_topics([topic])[topic].result(15)
    assert got[("kappa_topic_retention_seconds", (("topic", topic),))] == 86_400
    headroom = got[("kappa_topic_retention_headroom_seconds", (("topic", topic),))]
    assert 86_400 - 3600 - 30 < headroom <= 86_400 - 3600


def test_bad_or_taken_port_is_one_error_line(run_kappa):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        for port in ("70000", str(taken.getsockname()[1])):
            result = run_kappa("metrics", "serve", "--port", port)
            assert result.returncode == 2, result.stderr
            assert "Traceback" not in result.stderr
            expected = f"error: cannot listen on 127.0.0.1:{port}"
            assert result.stderr.strip().startswith(expected), result.stderr
