"""The exporter's histograms, pending apply, engine pipelines and batch tier, from the real services."""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import UTC, date, datetime

import pyarrow as pa
from confluent_kafka import Producer
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from jobs.monitoring.exporter import KappaCollector

Scraped = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def parse(text: str) -> Scraped:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def with_prefix(cfg, prefix: str, **streaming):
    return cfg.model_copy(update={"streaming": cfg.streaming.model_copy(
        update={"redis_prefix": prefix, **streaming})})


def batch(batch_id: int, seconds: float, apply_ms: int | None) -> str:
    record: dict = {"batch_id": batch_id, "batch_duration_ms": int(seconds * 1000)}
    if apply_ms is not None:
        record["apply_ms"] = {"redis_apply": apply_ms, "summaries": 1}
    return json.dumps(record)


def test_batch_histograms_and_pending_apply(stack, redis_client, tmp_path):
    prefix = f"mon{uuid.uuid4().hex[:8]}"
    cfg = with_prefix(stack, prefix)
    cfg = cfg.model_copy(update={"lake": cfg.lake.model_copy(update={"checkpoint_root": str(tmp_path)})})
    pending = tmp_path / "q-busy" / "kappa-state" / "pending-apply.json"
    pending.parent.mkdir(parents=True)
    pending.write_text(json.dumps({"format": "kappa-pending-apply/2", "batch_id": 5}))
    os.utime(pending, (time.time() - 120, time.time() - 120))
    for query in ("q-busy", "q-idle"):
        redis_client.hset(f"{prefix}:metrics:{query}:status", mapping={"state": "running", "pid": 1})
    history = f"{prefix}:metrics:q-busy:history"
    # the job pushes the newest first: batches 1..4, then 5 (4 shows again, as a recovery republishes)
    redis_client.lpush(history, batch(1, 0.2, 4), batch(2, 0.6, 20), batch(3, 3.0, 300), batch(4, 40.0, 2000))
    clock = Clock()
    registry = CollectorRegistry()
    collector = KappaCollector(cfg, clock=clock)
    registry.register(collector)
    try:
        first = parse(generate_latest(registry).decode())
        redis_client.lpush(history, batch(4, 40.0, 2000), batch(5, 0.1, None))
        clock.now += cfg.monitoring.cache_s
        second = parse(generate_latest(registry).decode())
    finally:
        collector.close()
        for key in redis_client.scan_iter(match=f"{prefix}:*"):
            redis_client.delete(key)
    busy = ("query", "q-busy")

    def bucket(got: Scraped, name: str, le: str) -> float:
        return got[(f"{name}_bucket", (("le", le), busy))]

    duration = "kappa_stream_batch_duration_seconds"
    assert [bucket(first, duration, le) for le in ("0.25", "0.5", "1.0", "5.0", "30.0", "60.0", "+Inf")] == [
        1, 1, 2, 3, 3, 4, 4]
    assert first[(f"{duration}_sum", (busy,))] == 43.8
    assert bucket(second, duration, "0.25") == 2
    assert second[(f"{duration}_count", (busy,))] == 5
    apply = "kappa_stream_redis_apply_seconds"
    assert [bucket(second, apply, le) for le in ("0.005", "0.025", "0.25", "0.5", "2.5", "+Inf")] == [
        1, 2, 2, 3, 4, 4]   # batch 5 has no apply time: not observed
    assert first[("kappa_stream_pending_applies", (busy,))] == 1
    assert first[("kappa_stream_pending_applies", (("query", "q-idle"),))] == 0
    assert 120 <= first[("kappa_stream_pending_apply_age_seconds", (busy,))] < 180


def test_engine_pipeline_batches_and_lag_of_its_current_version(stack, redis_client, kafka_props,
                                                                 topic_factory):
    import redis
    from confluent_kafka import Consumer

    from jobs.config.load import PROJECT_ROOT
    from jobs.monitoring.pipelines import PipelineMetrics
    from jobs.pipelines.registry import load_spec
    from jobs.views.versions import switch_current

    prefix = f"pipe{uuid.uuid4().hex[:8]}"
    source = topic_factory(2, prefix="source")
    spec = load_spec(PROJECT_ROOT / "pipelines" / "cards").spec
    spec = spec.model_copy(update={
        "source": spec.source.model_copy(update={"topic": source, "partitions": 2}),
        "streaming": spec.streaming.model_copy(update={"redis_prefix": prefix})})
    cfg = with_prefix(stack, "unused", views_topic=topic_factory(1, prefix="views"))
    producer = Producer(kafka_props)
    for partition, count in ((0, 5), (1, 3)):
        for _ in range(count):
            producer.produce(source, value=b"{}", partition=partition)
    assert producer.flush(15) == 0
    record = {"query": "cards-live", "batch_id": 7, "elapsed_ms": 1500, "input_rows": 9, "valid_rows": 6,
              "dlq_rows": 2, "late_rows": 1, "skipped_rows": 0, "emitted_ms": 1_700_000_000_000}
    redis_client.hset(f"{prefix}:metrics", "cards-live", json.dumps(record))
    redis_client.hset(f"{prefix}:fence", mapping={f"{source}:0": 2, "updated_ms": 1})
    redis_client.hset(f"{prefix}-v2:metrics", "cards-live-v2", json.dumps({**record, "batch_id": 3}))
    redis_client.hset(f"{prefix}-v2:fence", mapping={f"{source}:0": 5, f"{source}:1": 1})
    client = redis.Redis(**cfg.redis.client_kwargs(), decode_responses=True)
    consumer = Consumer({**kafka_props, "group.id": "test-pipeline-metrics"})
    clock = Clock()
    reader = PipelineMetrics(cfg, specs=[spec], clock=clock)
    try:
        v1 = parse(generate_latest(_registry(reader.read(client, consumer))).decode())
        switch_current(cfg, 2, 1, scope="cards/")
        clock.now += 61
        v2 = parse(generate_latest(_registry(reader.read(client, consumer))).decode())
    finally:
        consumer.close()
        client.close()
        for pattern in (f"{prefix}:*", f"{prefix}-v2:*"):
            for key in redis_client.scan_iter(match=pattern):
                redis_client.delete(key)
    key = (("pipeline", "cards"), ("query", "cards-live"))
    assert v1[("kappa_pipeline_last_batch_id", key)] == 7
    assert v1[("kappa_pipeline_last_batch_duration_seconds", key)] == 1.5
    assert v1[("kappa_pipeline_last_batch_rows", (("kind", "dlq"), *key))] == 2
    assert v1[("kappa_pipeline_last_batch_timestamp_seconds", key)] == 1_700_000_000
    lag = "kappa_pipeline_lag_records"
    assert v1[(lag, (("partition", "0"), ("pipeline", "cards"), ("topic", source)))] == 3
    assert v1[(lag, (("partition", "1"), ("pipeline", "cards"), ("topic", source)))] == 3  # no fence: all
    assert v2[("kappa_pipeline_last_batch_id", (("pipeline", "cards"), ("query", "cards-live-v2")))] == 3
    assert v2[(lag, (("partition", "0"), ("pipeline", "cards"), ("topic", source)))] == 0
    assert v2[(lag, (("partition", "1"), ("pipeline", "cards"), ("topic", source)))] == 2


def _registry(metrics):
    class Fixed:
        def collect(self):
            return metrics

    registry = CollectorRegistry()
    registry.register(Fixed())
    return registry


def test_batch_tier_newest_partition_replaced(stack, tmp_path):
    from jobs.batch.lake import replace_partitions
    from jobs.lake.delta import table_uri

    cfg = stack.model_copy(update={"lake": stack.lake.model_copy(update={"root": str(tmp_path)})})
    uri = table_uri(str(tmp_path), "gold.city_daily")
    began = time.time()
    for days in ([date(2026, 11, 26), date(2026, 11, 27)], [date(2026, 11, 20)]):   # then a backfill
        rows = pa.table({"event_date": days, "city": ["Oslo"] * len(days)})
        replace_partitions(uri, rows, column="event_date", dates=days, metadata={
            "kappa.batch.job": "city_daily", "kappa.batch.dates": json.dumps([d.isoformat() for d in days])})
    registry = CollectorRegistry()
    collector = KappaCollector(cfg)
    registry.register(collector)
    try:
        got = parse(generate_latest(registry).decode())
    finally:
        collector.close()
    table = (("table", "gold.city_daily"),)
    assert got[("kappa_batch_newest_partition_replaced_timestamp_seconds", table)] == datetime(
        2026, 11, 27, tzinfo=UTC).timestamp()
    assert got[("kappa_batch_last_run_partitions", table)] == 1
    assert began - 1 <= got[("kappa_batch_last_run_timestamp_seconds", table)] <= time.time() + 1
    assert ("kappa_batch_last_run_partitions", (("table", "gold.topic_daily"),)) not in got
    assert got[("kappa_exporter_source_up", (("source", "batch"),))] == 1
