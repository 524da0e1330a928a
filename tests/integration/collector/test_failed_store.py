"""Records the broker refuses go to the failed store after max_retries, and can be re-driven."""

from __future__ import annotations

import json
import random
import string
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from pipelines.rsvp.generator import RsvpGenerator
from tests.integration.collector.support import read_topic

TOPIC_MAX_BYTES = 4_000
BIG_NAME_BYTES = 8_000


@pytest.fixture()
def small_topic(kafka_props):
    """A topic whose max.message.bytes refuses the big records, and a way to lift the limit."""
    admin = AdminClient({**kafka_props, "log_level": "0"})
    name = f"raw.small.{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, 3, 1, config={"max.message.bytes": str(TOPIC_MAX_BYTES)})])[
        name].result(timeout=15)

    def lift() -> None:
        resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[ConfigEntry(
            "max.message.bytes", "1000000", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(timeout=15)

    return name, lift


def _wait_metrics(collector, condition, timeout_s: float = 30.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout_s
    while True:
        metrics = collector.metrics()
        if condition(metrics):
            return metrics
        assert time.monotonic() < deadline, metrics
        time.sleep(0.1)


def test_refused_records_move_to_failed_store_and_redrive_delivers_them(
        start_collector, small_topic, topic_factory, kafka_props, run_kappa):
    raw, lift_limit = small_topic
    collector = start_collector(raw, topic_factory(1, prefix="dlq"),
                                env={"KAPPA_COLLECTOR__MAX_RETRIES": "2"})
    items = list(RsvpGenerator(seed=14).generate(300))
    lines, big_keys = [], set()
    for index, item in enumerate(items):
        if index % 60 == 0:
            record = json.loads(item.line)
            noise = random.Random(index).choices(string.ascii_letters, k=BIG_NAME_BYTES)
            record["member"]["member_name"] = "".join(noise)  # incompressible enough for lz4
            lines.append(json.dumps(record).encode())
            big_keys.add(str(item.rsvp_id).encode())
        else:
            lines.append(item.line)
    all_keys = {str(item.rsvp_id).encode() for item in items}
    assert collector.post_lines(lines).status_code == 200

    metrics = _wait_metrics(collector, lambda m: m["pending"] == 0 and m["failed_store"] == len(big_keys))
    in_kafka = Counter(m.key for m in read_topic(kafka_props, raw))
    assert set(in_kafka) == all_keys - big_keys and max(in_kafka.values()) == 1
    assert metrics["accepted_total"] == sum(in_kafka.values()) + metrics["failed_store"]

    listed = run_kappa("collect", "failed", "list", "--json", env=collector.env)
    assert listed.returncode == 0, listed.stderr
    failed = json.loads(listed.stdout)
    assert failed["total"] == len(big_keys)
    assert {row["key"].encode() for row in failed["records"]} == big_keys
    assert all("too large" in row["reason"].lower() and row["attempts"] == 2 for row in failed["records"])

    usage = run_kappa("collect", "failed", "redrive", env=collector.env)
    assert usage.returncode == 2 and usage.stderr.strip().startswith("error: choose either --all")
    lift_limit()
    redriven = run_kappa("collect", "failed", "redrive", "--all", env=collector.env)
    assert redriven.returncode == 0 and f"re-drove {len(big_keys)} record(s)" in redriven.stdout

    _wait_metrics(collector, lambda m: m["pending"] == 0 and m["failed_store"] == 0
                  and m["redriven_total"] == len(big_keys))
    in_kafka = Counter(m.key for m in read_topic(kafka_props, raw))
    assert set(in_kafka) == all_keys and sum(in_kafka.values()) == len(all_keys)
    code, _ = collector.stop()
    assert code == 0
