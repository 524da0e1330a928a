"""The RSVP live views recomputed from the lake (pipelines/rsvp/views.py) on tiny inline rows, against
answers written by hand from docs/streaming.md ("What counts", "Late records: stream time")."""

from __future__ import annotations

import json

from pyspark.testing import assertDataFrameEqual

from pipelines.rsvp.gold import DLQ_POSITIONS
from pipelines.rsvp.lake_views import DELIVERED_COLUMNS, RSVP_COLUMNS
from pipelines.rsvp.views import (
    city_windows,
    deliveries,
    event_responses,
    topic_minutes,
    totals,
    trending_windows,
)

MINUTE = 60_000
T = 1_767_258_000_000   # 2026-01-01T09:00Z
DELIVERY = ("event_time_ms long, event_id string, response string, guests long, member_id long, "
            "topics array<string>, city string, late boolean")


def _raw(rsvp_id: int, mtime: int, response: str = "yes", guests: int = 0) -> tuple:
    value = json.dumps({"rsvp_id": rsvp_id, "mtime": mtime, "response": response, "guests": guests})
    return rsvp_id, mtime, value


def test_each_delivery_is_late_or_not_by_its_own_position_and_counts_its_own_response(spark):
    bronze = spark.createDataFrame([
        (*_raw(1, T), "raw", 0, 0),
        (*_raw(2, T + 5 * MINUTE), "raw", 0, 1),
        (*_raw(1, T), "raw", 0, 2),                       # rsvp 1 again: 5 minutes behind, late
        (*_raw(3, T + 60 * MINUTE, "maybe"), "raw", 0, 3),  # dead-lettered: moves no stream time
        (*_raw(4, T + 4 * MINUTE + 30_000), "raw", 0, 4),   # 30 s behind 09:05: on time
        (*_raw(5, T - 60 * MINUTE, guests=2), "raw", 1, 0),  # another partition: its own stream time
        (*_raw(5, T - 50 * MINUTE, "no"), "raw", 1, 1),     # rsvp 5 changed its mind
    ], DELIVERED_COLUMNS)
    dlq = spark.createDataFrame([("raw", 0, 3)], DLQ_POSITIONS)
    silver = spark.createDataFrame([   # one row per RSVP (rsvp 1's latest copy is the late one)
        (1, "e1", 101, ["Salsa"], "Barcelona"), (2, "e1", 102, ["Salsa"], "Barcelona"),
        (4, "e2", 104, ["Go"], "Madrid"), (5, "e2", 105, ["Go"], "Madrid"),
    ], RSVP_COLUMNS)

    rows = deliveries(bronze, dlq, silver, MINUTE)

    assertDataFrameEqual(rows, spark.createDataFrame([
        (T, "e1", "yes", 0, 101, ["Salsa"], "Barcelona", False),
        (T + 5 * MINUTE, "e1", "yes", 0, 102, ["Salsa"], "Barcelona", False),
        (T, "e1", "yes", 0, 101, ["Salsa"], "Barcelona", True),
        (T + 4 * MINUTE + 30_000, "e2", "yes", 0, 104, ["Go"], "Madrid", False),
        (T - 60 * MINUTE, "e2", "yes", 2, 105, ["Go"], "Madrid", False),
        (T - 50 * MINUTE, "e2", "no", 0, 105, ["Go"], "Madrid", False),
    ], DELIVERY))
    assertDataFrameEqual(city_windows(rows, MINUTE), spark.createDataFrame([
        (T, "Barcelona", 1), (T + 5 * MINUTE, "Barcelona", 1), (T + 4 * MINUTE, "Madrid", 1),
        (T - 60 * MINUTE, "Madrid", 1), (T - 50 * MINUTE, "Madrid", 1),
    ], "window_start_ms long, city string, count long"))
    assertDataFrameEqual(event_responses(rows), spark.createDataFrame(
        [("e1", 3, 0, 0), ("e2", 2, 1, 2)], "event_id string, yes long, no long, guests long"))


def test_topic_buckets_trending_windows_and_totals_of_on_time_deliveries(spark):
    rows = spark.createDataFrame([
        (T, "e1", "yes", 0, 1, ["Salsa", "Go"], "Madrid", False),
        (T + 30_000, "e1", "no", 0, 2, ["Salsa"], "Madrid", False),
        (T + 3 * MINUTE, "e2", "yes", 1, 1, ["Go"], "Lyon", False),
        (T + MINUTE, "e2", "yes", 0, 3, ["Salsa"], "Lyon", True),   # late: in no window, in the totals
    ], DELIVERY)

    minutes = topic_minutes(rows, MINUTE)

    assertDataFrameEqual(minutes, spark.createDataFrame(
        [(T, "Salsa", 2), (T, "Go", 1), (T + 3 * MINUTE, "Go", 1)],
        "window_start_ms long, topic string, count long"))
    # 3-minute windows every minute: a bucket is in the windows starting at it and 2 minutes before
    assertDataFrameEqual(trending_windows(minutes, 3 * MINUTE, MINUTE), spark.createDataFrame(
        [(T + k * MINUTE, "Salsa", 2) for k in (-2, -1, 0)] + [(T + k * MINUTE, "Go", 1) for k in (-2, -1, 0)]
        + [(T + k * MINUTE, "Go", 1) for k in (1, 2, 3)],
        "window_start_ms long, topic string, count long"))
    assertDataFrameEqual(totals(rows),
                         spark.createDataFrame([(4, 1, 3)], "valid long, late long, members long"))
