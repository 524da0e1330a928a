"""librdkafka's log lines are rate-limited per facility and text across every client of a process."""

from __future__ import annotations

import logging

from jobs.kafka.client import RateLimit

FAIL = ("[thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 "
        "failed: Connection refused (after {ms}ms in state CONNECT)")


def _record(client: str, text: str) -> logging.LogRecord:
    return logging.LogRecord("jobs.kafka.librdkafka", logging.ERROR, __file__, 1, "%s [%s] %s",
                             ("FAIL", client, text), None)


def test_one_line_per_interval_per_broker_with_the_count_held_back() -> None:
    now = [0.0]
    limit = RateLimit(interval_s=30, clock=lambda: now[0])
    first = _record("rdkafka#consumer-1", FAIL.format(ms=0))
    assert limit.filter(first) and first.getMessage().endswith("(after 0ms in state CONNECT)")
    for index in range(20):                       # other clients, other delays: the same line
        now[0] += 1
        assert not limit.filter(_record(f"rdkafka#producer-{index}", FAIL.format(ms=index)))
    other = FAIL.format(ms=0).replace("9092", "9093")
    assert limit.filter(_record("rdkafka#consumer-1", other))          # another broker: its own line
    now[0] = 31
    again = _record("rdkafka#consumer-9", FAIL.format(ms=3))
    assert limit.filter(again)
    assert again.getMessage().endswith("(20 more like it in the last 30 s)")
