"""The batch tables' pure transforms on tiny inline rows, against answers written by hand."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from pyspark.testing import assertDataFrameEqual

from pipelines.rsvp.gold import (
    BRONZE_READ,
    DLQ_READ,
    SILVER_READ,
    city_daily,
    delivered_rows,
    dlq_daily,
    event_stats,
    topic_daily,
)

D1, D2 = date(2026, 1, 1), date(2026, 1, 2)


def _at(hour: int, day: int = 1) -> datetime:
    return datetime(2026, 1, day, hour, tzinfo=UTC)


@pytest.fixture(scope="module")
def silver(spark):
    # event_date, rsvp_id, event_time, event_id, event_name, group_id, member_id, response,
    # guests, topics, city, country, late
    rows = [
        (D1, 1, _at(9), "e1", "Salsa night", 10, 100, "yes", 2, ["Salsa", "Jazz"], "Barcelona", "ES", False),
        (D1, 2, _at(10), "e1", "Salsa night", 10, 101, "no", 0, ["Salsa", "Jazz"], "Barcelona", "ES", True),
        (D1, 3, _at(11), "e2", "Jazz jam", 20, 100, "yes", 1, ["Jazz", "Jazz"], "Barcelona", "ES", False),
        (D1, 4, _at(12), "e3", "Go club", 30, 102, "yes", 0, ["Go"], "Madrid", "ES", False),
        (D2, 5, _at(8, 2), "e1", "Salsa night", 10, 103, "yes", 3, ["Salsa", "Jazz"], "Barcelona", "ES",
         False),
    ]
    return spark.createDataFrame(rows, SILVER_READ)


def test_city_daily(spark, silver):
    expected = spark.createDataFrame([
        (D1, "Barcelona", "ES", 3, 2, 1, 3, 2, 2, 1 / 3),
        (D1, "Madrid", "ES", 1, 1, 0, 0, 1, 1, 0.0),
        (D2, "Barcelona", "ES", 1, 1, 0, 3, 1, 1, 0.0),
    ], "event_date date, city string, country string, rsvps long, yes long, no long, guests long, "
       "members long, events long, late_share double")
    assertDataFrameEqual(silver.transform(city_daily), expected)


def test_topic_daily_counts_a_topic_once_per_rsvp_and_ranks_by_day(spark, silver):
    expected = spark.createDataFrame([
        (D1, "Jazz", 3, 2, 2, 1),   # rsvp 3 lists Jazz twice: counted once
        (D1, "Salsa", 2, 1, 1, 2),
        (D1, "Go", 1, 1, 1, 3),
        (D2, "Salsa", 1, 1, 1, 1),
        (D2, "Jazz", 1, 1, 1, 1),   # a tie shares the rank
    ], "event_date date, topic string, rsvps long, yes long, groups long, rank int")
    assertDataFrameEqual(silver.transform(topic_daily), expected)


def test_delivered_rows_keep_duplicates_and_drop_dead_letters(spark):
    raw = '{{"rsvp_id": {i}, "response": "{r}", "guests": {g}, "event": {{"event_id": "e1"}}}}'
    bronze = spark.createDataFrame([
        (D1, raw.format(i=1, r="yes", g=2), "rsvps.raw", 0, 0),
        (D1, raw.format(i=1, r="yes", g=2), "rsvps.raw", 0, 1),   # delivered twice: counts twice
        (D1, raw.format(i=2, r="no", g=0), "rsvps.raw", 1, 0),
        (D1, '{"rsvp_id": 3, "response": "maybe"}', "rsvps.raw", 1, 1),   # dead-lettered
    ], BRONZE_READ)
    dlq = spark.createDataFrame([("rsvps.raw", 1, 1), (None, None, None)],
                                "source_topic string, source_partition int, source_offset long")
    expected = spark.createDataFrame([(D1, "e1", "yes", 2), (D1, "e1", "yes", 2), (D1, "e1", "no", 0)],
                                     "event_date date, event_id string, response string, guests long")
    assertDataFrameEqual(delivered_rows(bronze, dlq), expected)


def test_event_stats_under_both_counting_rules(spark, silver):
    delivered = spark.createDataFrame([
        (D1, "e1", "yes", 2), (D1, "e1", "yes", 2), (D1, "e1", "no", 0), (D1, "e1", "no", 4),
        (D1, "e2", "yes", 1),
    ], "event_date date, event_id string, response string, guests long")
    expected = spark.createDataFrame([
        (D1, "e1", "Salsa night", _at(9), _at(10), 2, 1, 1, 2, 4, 2, 2, 4, 3),
        (D1, "e2", "Jazz jam", _at(11), _at(11), 1, 1, 0, 1, 1, 1, 0, 1, 2),
        (D1, "e3", "Go club", _at(12), _at(12), 1, 1, 0, 0, 0, 0, 0, 0, 1),
        (D2, "e1", "Salsa night", _at(8, 2), _at(8, 2), 1, 1, 0, 3, 0, 0, 0, 0, 4),
    ], "event_date date, event_id string, event_name string, first_rsvp timestamp, "
       "last_rsvp timestamp, rsvps long, yes long, no long, guests long, delivered long, "
       "delivered_yes long, delivered_no long, delivered_guests long, expected_attendance long")
    assertDataFrameEqual(event_stats(silver, delivered), expected)


def test_dlq_daily_groups_by_reason_and_source_kind(spark):
    dlq = spark.createDataFrame([
        (D1, "invalid_json", "stream:rsvps.raw/0/5", "rsvps.raw", 0, 5, _at(1)),
        (D1, "invalid_json", "stream:rsvps.raw/1/9", "rsvps.raw", 1, 9, _at(3)),
        (D1, "invalid_json", "http", None, None, None, _at(2)),
        (D2, "missing_field", "stream:rsvps.raw/0/7", "rsvps.raw", 0, 7, _at(4, 2)),
        (D2, None, None, None, None, None, _at(5, 2)),
    ], DLQ_READ)
    expected = spark.createDataFrame([
        (D1, "invalid_json", "stream", 2, _at(1), _at(3)),
        (D1, "invalid_json", "http", 1, _at(2), _at(2)),
        (D2, "missing_field", "stream", 1, _at(4, 2), _at(4, 2)),
        (D2, "unknown", "unknown", 1, _at(5, 2), _at(5, 2)),
    ], "dlq_date date, reason_code string, source string, dead_letters long, first_at timestamp, "
       "last_at timestamp")
    assertDataFrameEqual(dlq_daily(dlq), expected)
