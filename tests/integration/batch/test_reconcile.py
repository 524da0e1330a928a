"""``kappa batch reconcile`` against the session's Redis: zero differences on views that match
the lake, exactly the two keys a test breaks (a city count, a deleted event hash) otherwise."""

from __future__ import annotations

import json
import uuid
from datetime import date

import pytest
from deltalake import DeltaTable

from jobs.batch.reconcile import ViewsDrift, reconcile
from jobs.common.config import load_config
from jobs.common.delta import table_uri
from tests.integration.batch.support import silver_row, write_silver, write_table

pytestmark = pytest.mark.slow
W0 = 1_767_258_000_000   # 2026-01-01T09:00Z: the minute window of silver_row(.., 1, 9)
W1 = W0 + 3_600_000      # 10:00


def _bronze(rsvp_id: int, partition: int, offset: int) -> dict:
    return {"rsvp_id": rsvp_id, "value": "{}", "kafka_topic": "rsvps.raw", "kafka_partition": partition,
            "kafka_offset": offset, "event_date": date(2026, 1, 1)}


def _summary(kind: str, key: str, **fields: object) -> dict:
    empty = dict.fromkeys(("window_start_ms", "city", "count", "approx_distinct", "event_id", "yes", "no",
                           "guests"))
    return {"kind": kind, "key": key, **empty, **fields}


def seed(root: str, prefix: str, redis_client) -> None:
    """A lake and the Redis views a correct streaming job holds for it (written by hand)."""
    write_silver(root, [
        silver_row(1, 1, 9, city="Barcelona", event_id="e1", member_id=7, topics=("Salsa", "Jazz")),
        silver_row(2, 1, 9, city="Madrid", event_id="e1", member_id=8, response="no"),
        silver_row(3, 1, 10, city="Madrid", event_id="e2", member_id=7, guests=2, late=True),
        silver_row(4, 1, 10, city="Madrid", event_id="e2", member_id=9),
    ])
    # rsvp 1 delivered twice (counts twice), rsvp 4's only delivery was dead-lettered
    write_table(root, "bronze.rsvps_raw", [_bronze(1, 0, 0), _bronze(1, 0, 1), _bronze(2, 1, 0),
                                           _bronze(3, 1, 1), _bronze(4, 2, 0)], partition_by=["event_date"])
    write_table(root, "ops.dlq", [{"source_topic": "rsvps.raw", "source_partition": 2, "source_offset": 0,
                                   "dlq_date": date(2026, 1, 1)}])
    # the live views of these deliveries
    redis_client.zadd(f"{prefix}:cities:windows", {str(W0): W0})
    redis_client.hset(f"{prefix}:cities:{W0}", mapping={"Barcelona": 2, "Madrid": 1})
    redis_client.zadd(f"{prefix}:members:windows", {str(W0): W0})
    redis_client.pfadd(f"{prefix}:members:{W0}", "7", "8")
    redis_client.hset(f"{prefix}:event:e1", mapping={"yes": 2, "no": 1, "guests": 0, "event_name": "x"})
    redis_client.hset(f"{prefix}:event:e2", mapping={"yes": 1, "no": 0, "guests": 2, "event_name": "y"})
    redis_client.zadd(f"{prefix}:topics:all", {"Salsa": 4, "Jazz": 2})
    write_table(root, "gold.rsvp_summaries", [
        _summary("city_window", f"city_window/{W0}/Barcelona", window_start_ms=W0, city="Barcelona", count=2),
        _summary("city_window", f"city_window/{W0}/Madrid", window_start_ms=W0, city="Madrid", count=1),
        _summary("members_window", f"members_window/{W0}", window_start_ms=W0, approx_distinct=2),
        _summary("event", "event/e1", event_id="e1", yes=2, no=1, guests=0),
        _summary("event", "event/e2", event_id="e2", yes=1, no=0, guests=2),
    ])


@pytest.fixture()
def platform(stack, kappa_env, topic_factory, tmp_path, redis_client):
    root, prefix = str(tmp_path / "lake"), f"r{uuid.uuid4().hex[:8]}"
    cfg = load_config("test", environ={**kappa_env, "KAPPA_LAKE__ROOT": root,
                                       "KAPPA_STREAMING__REDIS_PREFIX": prefix,
                                       "KAPPA_STREAMING__METRICS_TOPIC": topic_factory(1, "metrics")})
    seed(root, prefix, redis_client)
    yield cfg, root, prefix
    for key in redis_client.scan_iter(match=f"{prefix}:*"):
        redis_client.delete(key)


def _metrics(cfg) -> list[dict]:
    from confluent_kafka import Consumer

    consumer = Consumer({**cfg.kafka.client_config(), "group.id": uuid.uuid4().hex,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([cfg.streaming.metrics_topic])
    found: list[dict] = []
    try:
        for _ in range(20):
            message = consumer.poll(1.0)
            if message is not None and not message.error():
                found.append(json.loads(message.value()))
            elif found:
                break
    finally:
        consumer.close()
    return found


def test_untouched_views_match_and_two_broken_keys_are_reported(spark, platform, redis_client):
    cfg, root, prefix = platform
    report = reconcile(spark, cfg)
    assert report.differences == []
    assert report.checked == {"redis": 7, "gold.rsvp_summaries": 5}   # 2 cities, 1 window, 2 events, 2 topics
    assert report.source_versions == {"silver.rsvps": 0, "bronze.rsvps_raw": 0, "ops.dlq": 0}
    metric = _metrics(cfg)[-1]
    assert (metric["kind"], metric["run_id"], metric["differences"], metric["drifts"]) == (
        "reconciliation", report.run_id, 0, 0)

    redis_client.hset(f"{prefix}:cities:{W0}", "Madrid", 5)
    redis_client.delete(f"{prefix}:event:e1")
    with pytest.raises(ViewsDrift, match="2 live view key") as raised:
        reconcile(spark, cfg)
    assert "docs/runbooks/views-drift.md" in str(raised.value)
    rows = DeltaTable(table_uri(root, "ops.reconciliation")).to_pyarrow_table().to_pylist()
    assert _metrics(cfg)[-1]["drifts"] == 2
    assert sorted((r["view"], r["key"], r["live_value"], r["lake_value"], r["allowed_error"], r["verdict"])
                  for r in rows) == [
        ("redis", f"city_window/{W0}/Madrid", "5", "1", 0.0, "drift"),
        ("redis", "event/e1", None, json.dumps([2, 1, 0]), 0.0, "drift"),
    ]


def test_a_windowed_range_skips_the_all_time_views(spark, platform, redis_client):
    cfg, _, prefix = platform
    redis_client.delete(f"{prefix}:event:e1")   # all-time: not compared for a range
    report = reconcile(spark, cfg, [date(2026, 1, 1)])
    assert report.differences == [] and report.checked == {"redis": 3, "gold.rsvp_summaries": 3}
