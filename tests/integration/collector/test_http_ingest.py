"""HTTP ingest against the real embedded broker: 100k records, nothing lost, rejects kept."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest

from pipelines.rsvp.generator import FaultMix, RsvpGenerator
from tests.integration.collector.support import assert_reason, read_topic

BATCH = 1_000


@pytest.mark.slow
def test_100k_over_http_every_accepted_record_is_in_kafka_once(start_collector, topics, kafka_props):
    raw, dlq = topics
    faults = FaultMix(late=0.01, out_of_order=0.01, duplicates=0.005, malformed=0.01)
    items = list(RsvpGenerator(seed=11, faults=faults).generate(100_000))
    valid = [item for item in items if not item.malformed]
    malformed = [item for item in items if item.malformed]
    assert len(malformed) > 500 and any(item.kind == "duplicate" for item in valid)
    collector = start_collector(raw, dlq)

    with httpx.Client() as client:
        for start in range(0, len(items), BATCH):
            batch = items[start:start + BATCH]
            response = collector.post_lines([item.line for item in batch], client)
            assert response.status_code in (200, 207), response.text[:300]
            for item, result in zip(batch, response.json()["results"], strict=True):
                assert ("id" in result) is (not item.malformed), (item.kind, result)
                if item.malformed:
                    expected_status = 413 if item.kind == "malformed:oversize" else 400
                    assert result["status"] == expected_status

    metrics = collector.wait_drained(timeout_s=60)
    in_kafka = read_topic(kafka_props, raw)
    assert Counter(m.key for m in in_kafka) == Counter(str(item.rsvp_id).encode() for item in valid)
    assert Counter(m.value for m in in_kafka) == Counter(item.line for item in valid)
    assert metrics["accepted_total"] == len(valid) == len(in_kafka) + metrics["failed_store"]
    assert metrics["failed_store"] == 0

    dead = read_topic(kafka_props, dlq)
    kind_of = {item.line: item.kind for item in malformed}
    assert Counter(m.value for m in dead) == Counter(item.line for item in malformed)
    for message in dead:
        assert_reason(kind_of[message.value], message.value, message.headers["kappa.reason"].decode())
        assert message.headers["kappa.source"] == b"http"
    assert metrics["rejected_total"] == len(malformed) == metrics["dlq_delivered_total"]
    code, output = collector.stop()
    assert code == 0 and "log drained" in output
