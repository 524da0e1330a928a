"""The live views recomputed from the lake: pure transforms for ``kappa batch reconcile``.

The live views (Redis, docs/streaming.md "Redis keys") count every delivered valid record by its
Kafka position; windowed views only records that were on time. The lake holds every delivered
record in ``bronze.rsvps_raw`` (dead letters removed by their position) and one analyzed row
per ``rsvp_id`` in ``silver.rsvps``, which carries the ``late`` flag the streaming job
decided: each delivery takes its RSVP's silver row (its city, member, topics, event and flag).
Lateness is read, never decided again here.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.batch.transforms import valid_deliveries

DELIVERY_COLUMNS = ("event_time_ms", "event_id", "response", "guests", "member_id", "topics", "city",
                    "late")


def deliveries(bronze: DataFrame, dlq: DataFrame, silver: DataFrame) -> DataFrame:
    """One row per valid delivered record, with the analyzed fields of its RSVP."""
    valid = valid_deliveries(bronze, dlq)
    analyzed = silver.select("rsvp_id", *DELIVERY_COLUMNS)
    return valid.select("rsvp_id").join(analyzed, "rsvp_id").select(*DELIVERY_COLUMNS)


def _window(size_ms: int):
    return (F.floor(F.col("event_time_ms") / size_ms) * size_ms).cast("long").alias("window_start_ms")


def _on_time(rows: DataFrame) -> DataFrame:
    return rows.where(~F.coalesce(F.col("late"), F.lit(False)))


def city_windows(rows: DataFrame, size_ms: int) -> DataFrame:
    """On-time deliveries per tumbling window and city: ``kappa:cities:<start>``."""
    return (_on_time(rows).groupBy(_window(size_ms), "city").agg(F.count(F.lit(1)).alias("count"))
            .select("window_start_ms", "city", "count"))


def member_windows(rows: DataFrame, size_ms: int) -> DataFrame:
    """Exact distinct members of on-time deliveries per window: ``kappa:members:<start>``."""
    return (_on_time(rows).groupBy(_window(size_ms))
            .agg(F.countDistinct("member_id").alias("members")).select("window_start_ms", "members"))


def event_responses(rows: DataFrame) -> DataFrame:
    """Every delivery per event: yes, no, guests of yes (``kappa:event:<event_id>``)."""
    yes = F.col("response") == F.lit("yes")
    return rows.groupBy("event_id").agg(
        F.sum(F.when(yes, 1).otherwise(0)).cast("long").alias("yes"),
        F.sum(F.when(yes, 0).otherwise(1)).cast("long").alias("no"),
        F.coalesce(F.sum(F.when(yes, F.col("guests"))), F.lit(0)).cast("long").alias("guests"),
    ).select("event_id", "yes", "no", "guests")


def topic_totals(rows: DataFrame) -> DataFrame:
    """Every delivery per topic of its group, all time (``kappa:topics:all``)."""
    return (rows.select(F.explode("topics").alias("topic")).groupBy("topic")
            .agg(F.count(F.lit(1)).alias("count")).select("topic", "count"))
