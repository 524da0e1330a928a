"""The pump's recovery from a fatal producer error: new producers, the log re-read, nothing lost."""

from __future__ import annotations

from collections import Counter

from confluent_kafka import KafkaError

from jobs.collector.service import Collector, Settings
from pipelines.rsvp.generator import RsvpGenerator
from pipelines.rsvp.schema import check_record
from tests.integration.collector.support import read_topic

BATCH = 1_000


def _settings(tmp_path, raw: str, dlq: str) -> Settings:
    return Settings(topic=raw, dlq_topic=dlq, log_path=tmp_path / "log.sqlite", buffer_limit=100_000,
                    max_record_bytes=65_536, max_retries=5, host="127.0.0.1", port=0,
                    record_check=check_record)


def test_a_fatal_producer_error_rebuilds_the_producers_and_loses_nothing(kafka_props, topics, tmp_path):
    raw, dlq = topics
    items = list(RsvpGenerator(seed=61).generate(2 * BATCH))
    lines = [item.line for item in items]
    collector = Collector(_settings(tmp_path, raw, dlq), kafka_props).start()
    try:
        first_producer = collector.pump._producers[0]
        collector.submit_lines(lines[:BATCH], "test").result(timeout=30)
        collector.pump.deliveries.fatal = KafkaError(KafkaError._FATAL, "injected fatal error", fatal=True)
        collector.submit_lines(lines[BATCH:], "test").result(timeout=30)
        assert collector.wait_drained(60), f"{collector.pending} still pending"
        assert collector.pump.recoveries == 1 and collector.pump.error is None
        assert collector.pump.deliveries.fatal is None
        assert collector.pump._producers[0] is not first_producer
    finally:
        collector.stop(10)
    in_kafka = Counter(m.key for m in read_topic(kafka_props, raw))
    assert set(in_kafka) == {str(item.rsvp_id).encode() for item in items}
    assert max(in_kafka.values()) <= 2  # only what was in flight at the error may come twice
    assert sum(in_kafka.values()) - len(in_kafka) <= BATCH
