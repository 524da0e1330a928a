"""The RSVP pipeline's gold transforms: pure ``DataFrame -> DataFrame`` functions (docs/tables.md).

Inputs are rows of ``silver.rsvps`` (one row per ``rsvp_id``: the latest version of each RSVP),
``bronze.rsvps_raw`` (every delivered record) and ``ops.dlq``, read with the columns of the
``*_READ`` declarations below (the read is the contract: a column not named is never read);
outputs are the columns of each table in order (``select`` is the contract). Nothing here
touches a session, a reader or a writer.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

SILVER, BRONZE, DLQ = "silver.rsvps", "bronze.rsvps_raw", "ops.dlq"
SILVER_READ = ("event_date date, rsvp_id long, event_time timestamp, event_id string, "
               "event_name string, group_id long, member_id long, response string, guests long, "
               "topics array<string>, city string, country string, late boolean")
BRONZE_READ = ("event_date date, value string, kafka_topic string, kafka_partition int, "
               "kafka_offset long")
DLQ_READ = ("dlq_date date, reason_code string, source string, source_topic string, "
            "source_partition int, source_offset long, kafka_timestamp timestamp")
DLQ_POSITIONS = "source_topic string, source_partition int, source_offset long"

YES, NO = "yes", "no"

CITY_DAILY_COLUMNS = ("event_date", "city", "country", "rsvps", "yes", "no", "guests", "members",
                      "events", "late_share")
TOPIC_DAILY_COLUMNS = ("event_date", "topic", "rsvps", "yes", "groups", "rank")
EVENT_STATS_COLUMNS = ("event_date", "event_id", "event_name", "first_rsvp", "last_rsvp", "rsvps",
                       "yes", "no", "guests", "delivered", "delivered_yes", "delivered_no",
                       "delivered_guests", "expected_attendance")
DLQ_DAILY_COLUMNS = ("dlq_date", "reason_code", "source", "dead_letters", "first_at", "last_at")
DELIVERED_COLUMNS = ("event_date", "event_id", "response", "guests")


def _is_yes() -> Column:
    return F.col("response") == F.lit(YES)


def _is_no() -> Column:
    return F.col("response") == F.lit(NO)


def _count_if(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0)).cast("long")


def city_daily(silver: DataFrame) -> DataFrame:
    """RSVPs per date, city and country (one per ``rsvp_id``), with the share marked late."""
    late = F.coalesce(F.col("late"), F.lit(False))
    grouped = silver.groupBy("event_date", "city", "country").agg(
        F.count(F.lit(1)).alias("rsvps"),
        _count_if(_is_yes()).alias("yes"),
        _count_if(_is_no()).alias("no"),
        F.coalesce(F.sum("guests"), F.lit(0)).cast("long").alias("guests"),
        F.countDistinct("member_id").alias("members"),
        F.countDistinct("event_id").alias("events"),
        _count_if(late).alias("_late"),
    )
    return grouped.select(
        *CITY_DAILY_COLUMNS[:-1],
        (F.col("_late") / F.col("rsvps")).cast("double").alias("late_share"),
    )


def topic_daily(silver: DataFrame) -> DataFrame:
    """RSVPs per date and topic (an RSVP counts once for each distinct topic of its group).

    ``rank`` is the topic's rank of the day by RSVPs (1 = most; ties share a rank).
    """
    topics = silver.select(
        "event_date", "group_id", "response",
        F.explode(F.array_distinct(F.col("topics"))).alias("topic"),
    )
    grouped = topics.groupBy("event_date", "topic").agg(
        F.count(F.lit(1)).alias("rsvps"),
        _count_if(_is_yes()).alias("yes"),
        F.countDistinct("group_id").alias("groups"),
    )
    by_day = Window.partitionBy("event_date").orderBy(F.desc("rsvps"))
    return grouped.select(*TOPIC_DAILY_COLUMNS[:-1], F.rank().over(by_day).cast("int").alias("rank"))


def dead_positions(dlq: DataFrame) -> DataFrame:
    """The Kafka positions the streaming job dead-lettered, once each (``ops.dlq`` rows that have one).

    Dead letters of the collector have no source position; a dead letter written twice (the
    dead-letter topic is at least once) names its position twice.
    """
    return dlq.select(
        F.col("source_topic").alias("kafka_topic"),
        F.col("source_partition").cast("int").alias("kafka_partition"),
        F.col("source_offset").cast("long").alias("kafka_offset"),
    ).where(F.col("kafka_offset").isNotNull()).distinct()


def valid_deliveries(bronze: DataFrame, dlq: DataFrame) -> DataFrame:
    """The bronze rows whose Kafka position ``ops.dlq`` does not name (the valid deliveries)."""
    return bronze.join(dead_positions(dlq), ["kafka_topic", "kafka_partition", "kafka_offset"], "left_anti")


def delivered_rows(bronze: DataFrame, dlq: DataFrame) -> DataFrame:
    """Every valid delivered record (bronze rows the streaming job did not dead-letter).

    A record sent twice sits at two offsets and stays twice: the counting rule of the live
    views (docs/streaming.md "What counts").
    """
    valid = valid_deliveries(bronze, dlq)
    text = F.col("value")
    return valid.select(
        "event_date",
        F.get_json_object(text, "$.event.event_id").alias("event_id"),
        F.get_json_object(text, "$.response").alias("response"),
        F.coalesce(F.get_json_object(text, "$.guests").try_cast("long"), F.lit(0)).alias("guests"),
    ).where(F.col("event_id").isNotNull())


def event_stats(silver: DataFrame, delivered: DataFrame) -> DataFrame:
    """Per date and event: responses under both counting rules, and the expected attendance.

    ``rsvps``/``yes``/``no``/``guests`` count the latest version of each RSVP (silver);
    ``delivered*`` count every delivered record, as the live event views do. ``guests`` are
    those of yes responses; ``expected_attendance`` = ``yes + guests``.
    """
    latest = silver.groupBy("event_date", "event_id").agg(
        F.max("event_name").alias("event_name"),
        F.min("event_time").alias("first_rsvp"),
        F.max("event_time").alias("last_rsvp"),
        F.count(F.lit(1)).alias("rsvps"),
        _count_if(_is_yes()).alias("yes"),
        _count_if(_is_no()).alias("no"),
        F.coalesce(F.sum(F.when(_is_yes(), F.col("guests"))), F.lit(0)).cast("long").alias("guests"),
    )
    every = delivered.groupBy("event_date", "event_id").agg(
        F.count(F.lit(1)).alias("delivered"),
        _count_if(_is_yes()).alias("delivered_yes"),
        _count_if(_is_no()).alias("delivered_no"),
        F.coalesce(F.sum(F.when(_is_yes(), F.col("guests"))), F.lit(0)).cast("long")
        .alias("delivered_guests"),
    )
    joined = latest.join(every, ["event_date", "event_id"], "left")
    zero = F.lit(0).cast("long")
    return joined.select(
        *EVENT_STATS_COLUMNS[:9],
        *[F.coalesce(F.col(name), zero).alias(name) for name in EVENT_STATS_COLUMNS[9:13]],
        (F.col("yes") + F.col("guests")).alias("expected_attendance"),
    )


def dlq_daily(dlq: DataFrame) -> DataFrame:
    """Dead letters per date, reason code and source kind (``stream``, ``http``, ``file``, ...)."""
    kind = F.coalesce(F.split(F.col("source"), ":", 2).getItem(0), F.lit("unknown"))
    reason = F.coalesce(F.col("reason_code"), F.lit("unknown"))
    grouped = dlq.groupBy("dlq_date", reason.alias("reason_code"), kind.alias("source")).agg(
        F.count(F.lit(1)).alias("dead_letters"),
        F.min("kafka_timestamp").alias("first_at"),
        F.max("kafka_timestamp").alias("last_at"),
    )
    return grouped.select(*DLQ_DAILY_COLUMNS)
