"""Pure ``DataFrame -> DataFrame`` transforms from a Kafka read to each table's rows.

Input: the Kafka source schema (docs/kafka-source.md). Output: the columns of docs/tables.md, in
order (``select`` is the contract). Nothing here touches a session, a reader or a writer.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

KAFKA_POSITION = {"topic": "kafka_topic", "partition": "kafka_partition", "offset": "kafka_offset",
                  "timestamp": "kafka_timestamp"}

ANALYZED_SCHEMA = T.StructType([
    T.StructField("schema_version", T.IntegerType()),
    T.StructField("rsvp_id", T.LongType()),
    T.StructField("event_time_ms", T.LongType()),
    T.StructField("event_id", T.StringType()),
    T.StructField("event_name", T.StringType()),
    T.StructField("group_id", T.LongType()),
    T.StructField("group_name", T.StringType()),
    T.StructField("member_id", T.LongType()),
    T.StructField("response", T.StringType()),
    T.StructField("guests", T.LongType()),
    T.StructField("topics", T.ArrayType(T.StringType())),
    T.StructField("city", T.StringType()),
    T.StructField("country", T.StringType()),
    T.StructField("state", T.StringType()),
    T.StructField("lat", T.DoubleType()),
    T.StructField("lon", T.DoubleType()),
    T.StructField("venue_id", T.LongType()),
    T.StructField("source_topic", T.StringType()),
    T.StructField("source_partition", T.IntegerType()),
    T.StructField("source_offset", T.LongType()),
    T.StructField("kafka_timestamp_ms", T.LongType()),
    T.StructField("ingest_lag_ms", T.LongType()),
    T.StructField("late", T.BooleanType()),
])

SUMMARY_ITEM = T.StructType([
    T.StructField("item", T.StringType()),
    T.StructField("count", T.LongType()),
    T.StructField("error", T.DoubleType()),
])

SUMMARY_SCHEMA = T.StructType([
    T.StructField("schema_version", T.IntegerType()),
    T.StructField("kind", T.StringType()),
    T.StructField("key", T.StringType()),
    T.StructField("window_start_ms", T.LongType()),
    T.StructField("window_end_ms", T.LongType()),
    T.StructField("city", T.StringType()),
    T.StructField("count", T.LongType()),
    T.StructField("items", T.ArrayType(SUMMARY_ITEM)),
    T.StructField("approx_distinct", T.LongType()),
    T.StructField("error", T.DoubleType()),
    T.StructField("event_id", T.StringType()),
    T.StructField("yes", T.LongType()),
    T.StructField("no", T.LongType()),
    T.StructField("guests", T.LongType()),
    T.StructField("query", T.StringType()),
    T.StructField("batch_id", T.LongType()),
    T.StructField("emitted_ms", T.LongType()),
])


def kafka_columns() -> list[Column]:
    """The record's Kafka position: ``kafka_topic``, ``_partition``, ``_offset``, ``_timestamp``."""
    return [F.col(source).alias(name) for source, name in KAFKA_POSITION.items()]


def _ms_to_timestamp(column: Column) -> Column:
    return F.timestamp_millis(column)


def _header(name: str) -> Column:
    """The value (as text) of the first header called ``name``, or null."""
    matching = F.filter(F.coalesce(F.col("headers"), F.array()), lambda h: h["key"] == F.lit(name))
    return F.try_element_at(matching, F.lit(1))["value"].cast("string")


def bronze_rows(raw: DataFrame) -> DataFrame:
    """``rsvps.raw`` records as delivered: original JSON plus key fields and Kafka position."""
    text = F.col("value").cast("string")
    mtime = F.get_json_object(text, "$.mtime").try_cast("long")  # a bad record is kept, not fatal
    event_time = F.coalesce(_ms_to_timestamp(mtime), F.col("timestamp"))
    return raw.select(
        F.get_json_object(text, "$.rsvp_id").try_cast("long").alias("rsvp_id"),
        mtime.alias("mtime"),
        event_time.alias("event_time"),
        text.alias("value"),
        *kafka_columns(),
        F.to_date(event_time).alias("event_date"),
    )


def dlq_rows(dlq: DataFrame) -> DataFrame:
    """``rsvps.dlq`` records: original bytes, reason headers split into columns (needs headers)."""
    reason = _header("kappa.reason")
    return dlq.select(
        F.split(reason, ":", 2).getItem(0).alias("reason_code"),
        reason.alias("reason"),
        _header("kappa.source").alias("source"),
        _header("kappa.source_topic").alias("source_topic"),
        _header("kappa.source_partition").try_cast("int").alias("source_partition"),
        _header("kappa.source_offset").try_cast("long").alias("source_offset"),
        F.col("value"),
        *kafka_columns(),
        F.to_date("timestamp").alias("dlq_date"),
    )


def latest_per(keys: list[str], order: list[Column]) -> Callable[[DataFrame], DataFrame]:
    """One row per ``keys`` (the first by ``order``); rows whose first key is null all stay."""
    window = Window.partitionBy(*keys).orderBy(*order)

    def pick(df: DataFrame) -> DataFrame:
        ranked = df.withColumn("_rank", F.row_number().over(window))
        keyless = F.col(keys[0]).isNull()  # malformed rows stay, for the quality gate to see
        return ranked.where((F.col("_rank") == 1) | keyless).drop("_rank")

    return pick


def silver_rows(analyzed: DataFrame) -> DataFrame:
    """``rsvps.analyzed`` parsed; one row per ``rsvp_id`` (latest event time, then offset)."""
    parsed = analyzed.select(F.from_json(F.col("value").cast("string"), ANALYZED_SCHEMA).alias("r"),
                             *kafka_columns())
    names = [field.name for field in ANALYZED_SCHEMA.fields]
    rows = parsed.select(
        *[F.col(f"r.{name}").alias(name) for name in names],
        _ms_to_timestamp(F.col("r.event_time_ms")).alias("event_time"),
        "kafka_partition", "kafka_offset", "kafka_timestamp",
        F.to_date(_ms_to_timestamp(F.col("r.event_time_ms"))).alias("event_date"),
    )
    latest = latest_per(["rsvp_id"], [F.desc_nulls_last("event_time_ms"), F.desc("source_offset"),
                                       F.desc("kafka_offset")])
    return rows.transform(latest)


def gold_rows(summaries: DataFrame) -> DataFrame:
    """``rsvps.summaries`` parsed; one row per ``key`` (latest emitted, then batch, then offset)."""
    parsed = summaries.select(F.from_json(F.col("value").cast("string"), SUMMARY_SCHEMA).alias("s"),
                              *kafka_columns())
    names = [field.name for field in SUMMARY_SCHEMA.fields]
    rows = parsed.select(
        *[F.col(f"s.{name}").alias(name) for name in names],
        "kafka_partition", "kafka_offset", "kafka_timestamp",
    )
    latest = latest_per(["key"], [F.desc_nulls_last("emitted_ms"), F.desc_nulls_last("batch_id"),
                                   F.desc("kafka_offset")])
    return rows.transform(latest)
