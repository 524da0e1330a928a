"""Gold-by-day transforms of the card decisions, on tiny inline data with hand-written expectations."""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.testing import assertDataFrameEqual

from pipelines.cards.gold import flags_by_country_daily, flags_by_country_window, flags_by_merchant_daily

DAY1 = 1_793_491_200_000  # 2026-11-01T00:00:00Z
DAY2 = DAY1 + 86_400_000
COLUMNS = (
    "card_id string, merchant_id string, country string, event_time_ms long, reason string, flagged boolean"
)


@pytest.fixture(scope="module")
def silver(spark):
    rows = [
        ("c1", "m1", "FR", DAY1 + 1_000, "ok", False),
        ("c1", "m2", "US", DAY1 + 2_000, "impossible_travel", True),
        ("c2", "m1", "FR", DAY1 + 61_000, "amount_over_limit", True),
        ("c3", "m1", "FR", DAY2 - 1, "ok", False),  # the last ms of day 1
        ("c3", "m1", "FR", DAY2, "impossible_travel", True),  # the first ms of day 2
    ]
    return spark.createDataFrame(rows, COLUMNS)


def test_flags_by_country_daily(spark, silver):
    d1, d2 = dt.date(2026, 11, 1), dt.date(2026, 11, 2)
    expected = spark.createDataFrame(
        [(d1, "FR", 3, 1, 0, 1, 1 / 3), (d1, "US", 1, 1, 1, 0, 1.0), (d2, "FR", 1, 1, 1, 0, 1.0)],
        "event_date date, country string, transactions long, flagged long, impossible_travel long, "
        "amount_over_limit long, flag_rate double",
    )
    assertDataFrameEqual(flags_by_country_daily(silver), expected)


def test_flags_by_merchant_daily(spark, silver):
    d1, d2 = dt.date(2026, 11, 1), dt.date(2026, 11, 2)
    expected = spark.createDataFrame(
        [(d1, "m1", 3, 1, 0, 1, 1 / 3), (d1, "m2", 1, 1, 1, 0, 1.0), (d2, "m1", 1, 1, 1, 0, 1.0)],
        "event_date date, merchant_id string, transactions long, flagged long, impossible_travel long, "
        "amount_over_limit long, flag_rate double",
    )
    assertDataFrameEqual(flags_by_merchant_daily(silver), expected)


def test_flags_by_country_window_counts_on_time_flags(spark, silver):
    late = silver.withColumn("late", silver.card_id == "c3")
    expected = spark.createDataFrame(
        [(DAY1, "US", 1), (DAY1 + 60_000, "FR", 1)], "window_start_ms long, country string, flagged long"
    )
    assertDataFrameEqual(flags_by_country_window(late), expected)
