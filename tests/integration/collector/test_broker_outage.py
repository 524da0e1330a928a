"""Broker stopped during ingestion: the collector buffers in its log, says so, then drains.

Uses a private embedded broker (its own port and data folder) so the session's shared broker
is never stopped.
"""

from __future__ import annotations

import time
from collections import Counter

import httpx
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from pipelines.rsvp.generator import RsvpGenerator
from tests.integration.collector.support import read_topic

BUFFER_LIMIT = 3_000
BATCH = 250


def _wait(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.slow
def test_broker_down_collector_buffers_to_limit_then_drains(private_broker, start_collector, run_kappa):
    cfg, stack = private_broker
    props = cfg.kafka.client_config()
    raw, dlq = "rsvps.raw.outage", "rsvps.dlq.outage"
    admin = AdminClient({**props, "log_level": "0"})
    for future in admin.create_topics([NewTopic(raw, 3, 1), NewTopic(dlq, 1, 1)]).values():
        future.result(timeout=15)
    collector = start_collector(raw, dlq, env={
        "KAPPA_KAFKA__BOOTSTRAP_SERVERS": cfg.kafka.bootstrap_servers,
        "KAPPA_COLLECTOR__BUFFER_LIMIT": str(BUFFER_LIMIT)})
    items = iter(RsvpGenerator(seed=13).generate(8_000))
    accepted: list[bytes] = []

    def post(client: httpx.Client, count: int) -> httpx.Response:
        batch = [next(items) for _ in range(count)]
        response = collector.post_lines([item.line for item in batch], client)
        if response.status_code == 200:
            accepted.extend(str(item.rsvp_id).encode() for item in batch)
        return response

    with httpx.Client() as client:
        assert post(client, 500).status_code == 200
        collector.wait_drained(timeout_s=30)

        stack.down(progress=lambda message: None)
        refused = None
        for _ in range(BUFFER_LIMIT // BATCH + 5):
            response = post(client, BATCH)
            if response.status_code != 200:
                refused = response
                break
        assert refused is not None and refused.status_code == 503, "buffer limit never reached"
        assert int(refused.headers["retry-after"]) >= 1
        assert "buffer full" in refused.json()["error"]
        assert len(accepted) >= 500 + BUFFER_LIMIT

        _wait(lambda: collector.metrics()["broker_up"] == 0, 15, "broker_up=0")
        metrics = collector.metrics()
        assert metrics["pending"] >= BUFFER_LIMIT and metrics["acknowledged_total"] == 500
        status = run_kappa("collect", "status", "--url", collector.url)
        assert status.returncode == 0, status.stderr
        assert "broker        DOWN" in status.stdout and f"/ buffer_limit {BUFFER_LIMIT}" in status.stdout
        assert httpx.get(f"{collector.url}/healthz").json()["broker_up"] is False

        stack.up(progress=lambda message: None)
        metrics = collector.wait_drained(timeout_s=60)
        assert post(client, BATCH).status_code == 200
        metrics = collector.wait_drained(timeout_s=30)

    in_kafka = Counter(m.key for m in read_topic(props, raw))
    assert set(in_kafka) == set(accepted)
    assert sum(in_kafka.values()) == len(accepted) == metrics["accepted_total"]
    assert metrics["broker_up"] == 1 and metrics["failed_store"] == 0
    code, _ = collector.stop()
    assert code == 0
