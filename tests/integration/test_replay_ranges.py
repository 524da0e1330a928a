"""Replay ranges against the topic's retention (jobs/orchestration/ranges.py) on the embedded broker:
a range older than ``retention.ms`` fails closed even when the log still starts at offset 0."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from jobs.orchestration.ranges import RangeNotRetained, check_retained, resolve_interval
from tests.conftest import delete_topics

WEEK_MS = 7 * 24 * 3600 * 1000


@pytest.fixture()
def week_topic(kafka_props):
    admin = AdminClient(kafka_props)
    name = f"week.{uuid.uuid4().hex[:10]}"
    week = NewTopic(name, 2, 1, config={"retention.ms": str(WEEK_MS)})
    admin.create_topics([week])[name].result(timeout=15)
    producer = Producer(kafka_props)
    for index in range(6):
        producer.produce(name, value=b"{}", key=str(index).encode(), partition=index % 2)
    assert producer.flush(30) == 0
    yield name
    delete_topics(admin, [name])


def test_a_range_older_than_retention_fails_closed_on_a_log_that_starts_at_zero(stack, week_topic):
    now = datetime.now(UTC)
    month_ago = now - timedelta(days=30)
    old = resolve_interval(stack, week_topic, month_ago, month_ago + timedelta(hours=1))
    assert old.start == {0: 0, 1: 0} and old.records == 0        # the log still starts at offset 0
    with pytest.raises(RangeNotRetained) as failure:
        check_retained(stack, old, month_ago)
    message = str(failure.value)
    assert f"{week_topic}-0: the range starts at offset 0 ({month_ago.isoformat()})" in message
    assert "retention horizon" in message and "(now - retention.ms)" in message

    recent = now - timedelta(hours=1)
    check_retained(stack, resolve_interval(stack, week_topic, recent, now + timedelta(minutes=1)), recent)
    days_ago = now - timedelta(days=3)           # within retention, before the first record: nothing lost
    check_retained(stack, resolve_interval(stack, week_topic, days_ago, days_ago + timedelta(hours=1)),
                   days_ago)
