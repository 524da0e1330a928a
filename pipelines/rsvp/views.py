"""The RSVP live views recomputed from the lake: pure transforms for ``kappa batch reconcile``.

The live views (Redis, docs/streaming.md "Redis keys") count every delivered valid record by its
Kafka position; windowed views only records that were on time. The lake holds every delivered
record in ``bronze.rsvps_raw`` (dead letters removed by their position) and one analyzed row
per ``rsvp_id`` in ``silver.rsvps``. A delivery's own bytes give what can differ between the
deliveries of one RSVP (its event time, response and guests), and whether it was late is its
own too: two copies of an RSVP delivered minutes apart can be on time and late, while silver
keeps the flag of one. So each delivery's flag follows the stream-time rule (docs/streaming.md
"Late records: stream time") over the valid deliveries of its Kafka partition in offset order,
a pure function of the log that bronze holds whole; what every delivery of an RSVP shares (its
event, member, topics, normalized city) comes from its silver row.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pipelines.rsvp.gold import valid_deliveries

DELIVERY_COLUMNS = ("event_time_ms", "event_id", "response", "guests", "member_id", "topics", "city",
                    "late")
SHARED_COLUMNS = ("event_id", "member_id", "topics", "city")   # the same in every delivery of an RSVP


def deliveries(bronze: DataFrame, dlq: DataFrame, silver: DataFrame, grace_ms: int) -> DataFrame:
    """One row per valid delivered record, with its own fields and its RSVP's shared ones.

    Its own: event time, response, guests and ``late`` (``mtime`` more than ``grace_ms`` below
    the largest ``mtime`` of the valid deliveries before it in its partition). ``bronze`` needs
    every delivery of the partitions (not only those of some dates): the stream time at a
    record depends on all records before it.
    """
    valid = valid_deliveries(bronze, dlq)
    before = (Window.partitionBy("kafka_topic", "kafka_partition").orderBy("kafka_offset")
              .rowsBetween(Window.unboundedPreceding, -1))
    stream_ms = F.max("mtime").over(before)
    own = valid.select(
        "rsvp_id",
        F.col("mtime").alias("event_time_ms"),
        F.get_json_object("value", "$.response").alias("response"),
        F.coalesce(F.get_json_object("value", "$.guests").try_cast("long"), F.lit(0)).alias("guests"),
        F.coalesce(F.col("mtime") < stream_ms - F.lit(grace_ms), F.lit(False)).alias("late"),
    )
    return own.join(silver.select("rsvp_id", *SHARED_COLUMNS), "rsvp_id").select(*DELIVERY_COLUMNS)


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


def topic_minutes(rows: DataFrame, slide_ms: int) -> DataFrame:
    """On-time deliveries per slide bucket and topic of the group: ``kappa:topics:minute:<start>``."""
    return (_on_time(rows).select(_window(slide_ms), F.explode("topics").alias("topic"))
            .groupBy("window_start_ms", "topic").agg(F.count(F.lit(1)).alias("count"))
            .select("window_start_ms", "topic", "count"))


def trending_windows(minutes: DataFrame, size_ms: int, slide_ms: int) -> DataFrame:
    """Per sliding window (``size_ms`` every ``slide_ms``) and topic, the sum of its buckets.

    ``minutes`` are :func:`topic_minutes`; a bucket belongs to the ``size_ms / slide_ms`` windows
    that start at it or up to a window before it: ``kappa:trending:<start>``, the union of the
    window's buckets.
    """
    last_step = (size_ms // slide_ms - 1) * slide_ms
    starts = F.sequence(F.col("window_start_ms") - F.lit(last_step), F.col("window_start_ms"),
                        F.lit(slide_ms).cast("long"))
    return (minutes.select(F.explode(starts).alias("start"), "topic", "count")
            .groupBy("start", "topic").agg(F.sum("count").cast("long").alias("count"))
            .select(F.col("start").alias("window_start_ms"), "topic", "count"))


def totals(rows: DataFrame) -> DataFrame:
    """One row over every valid delivery: its ``valid`` and ``late`` counts, exact ``members``.

    ``kappa:totals`` fields ``valid``, ``late``; ``members`` is what ``kappa:members:all`` estimates.
    """
    late = F.coalesce(F.col("late"), F.lit(False))
    return rows.agg(
        F.count(F.lit(1)).alias("valid"),
        F.coalesce(F.sum(F.when(late, 1).otherwise(0)), F.lit(0)).cast("long").alias("late"),
        F.countDistinct("member_id").alias("members"),
    )
