"""Backoff, URL validation, delivery bookkeeping and the settings durability depends on."""

from __future__ import annotations

import random
import time

import pytest
from confluent_kafka import KafkaError

from jobs.collector.log import RECORD, Row
from jobs.collector.producer import PRODUCER_REQUIRED, Deliveries, producer_config, retry_delay
from jobs.collector.pull import Backoff, PullError, validate_url


def test_backoff_grows_exponentially_with_full_jitter_and_resets():
    backoff = Backoff(base_s=0.5, cap_s=4.0, rng=random.Random(1))
    delays = [backoff.next_delay() for _ in range(8)]
    ceilings = [0.5, 1, 2, 4, 4, 4, 4, 4]
    assert all(0 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert max(delays[3:]) > 1.0
    backoff.reset()
    assert backoff.next_delay() <= 0.5


def test_retry_delay_has_equal_jitter_and_a_cap():
    rng = random.Random(2)
    assert all(0.25 <= retry_delay(1, rng) <= 0.5 for _ in range(50))
    assert all(15 <= retry_delay(20, rng) <= 30 for _ in range(50))


@pytest.mark.parametrize("url", ["ws://h/x", "wss://h:1/x", "http://127.0.0.1:8/s", "https://h"])
def test_stream_urls_accepted(url):
    assert validate_url(url) == url


@pytest.mark.parametrize("url", ["ftp://h/x", "h:80/x", "file:///etc/passwd", "http://"])
def test_other_urls_refused_with_a_hint(url):
    with pytest.raises(PullError, match="--url must be a ws://, wss://, http:// or https:// URL"):
        validate_url(url)


def test_configured_client_properties_cannot_weaken_durability():
    props = producer_config({"bootstrap.servers": "b:1", "acks": "1", "enable.idempotence": "false",
                             "linger.ms": "5", "receive.message.max.bytes": "1000000000"})
    assert {k: props[k] for k in PRODUCER_REQUIRED} == {"enable.idempotence": "true", "acks": "all"}
    assert props["linger.ms"] == "5" and "receive.message.max.bytes" not in props
    assert props["compression.type"] == "lz4"
    isolated = producer_config({"bootstrap.servers": "b:1"}, isolated=True)
    assert isolated["batch.num.messages"] == "1"


def _row(rid: int = 1, attempts: int = 0) -> Row:
    return Row(rid, RECORD, "raw", b"k", b"v", None, attempts)


def test_deliveries_ack_retry_and_fail_after_max_retries():
    deliveries = Deliveries(max_retries=2, seed=1)
    deliveries.callback(_row(1))(None, None)
    deliveries.callback(_row(2))(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), None)
    deliveries.callback(_row(3, attempts=1))(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), None)
    records, rejects, attempts, failures = deliveries.take()
    assert records == [1] and rejects == []
    assert attempts == [(2, "Broker: Message size too large")]
    assert failures == [(3, RECORD, "Broker: Message size too large")]
    (retried, isolated), = deliveries.due_retries(time.monotonic() + 60)
    assert retried.id == 2 and retried.attempts == 1 and isolated


def test_a_timeout_during_an_outage_costs_no_attempt():
    deliveries = Deliveries(max_retries=1, seed=1)
    deliveries.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    assert deliveries.broker_down
    deliveries.callback(_row(5))(KafkaError(KafkaError._MSG_TIMED_OUT), None)
    assert deliveries.take() == ([], [], [], [])
    (retried, isolated), = deliveries.due_retries(time.monotonic() + 60)
    assert retried.attempts == 0 and not isolated
    deliveries.callback(retried)(None, None)
    assert not deliveries.broker_down and deliveries.take()[0] == [5]


def test_reports_of_an_older_producer_generation_are_ignored():
    deliveries = Deliveries(max_retries=3)
    stale = deliveries.callback(_row(7))
    deliveries.new_generation()
    stale(None, None)
    assert deliveries.take() == ([], [], [], []) and deliveries.inflight == 0
