"""The RSVP pipeline's loaded tables: what each reads, its Spark schema, row transform and keys.

The loader (jobs/loader/) takes these specs from the pipeline's definition (``pipeline.tables``)
and reads each table's topic through them; the columns are docs/tables.md's, in order
(``select`` is the contract). The transforms are pure ``DataFrame -> DataFrame`` functions.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.loader.tables import TableSpec
from jobs.loader.transforms import kafka_columns, latest_per

ROWS = "pipelines.rsvp.tables"
POSITION = ("kafka_partition", "kafka_offset")

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


def silver_rows(analyzed: DataFrame) -> DataFrame:
    """``rsvps.analyzed`` parsed; one row per ``rsvp_id`` (latest event time, then offset)."""
    parsed = analyzed.select(F.from_json(F.col("value").cast("string"), ANALYZED_SCHEMA).alias("r"),
                             *kafka_columns())
    names = [field.name for field in ANALYZED_SCHEMA.fields]
    event_time = F.timestamp_millis(F.col("r.event_time_ms"))
    rows = parsed.select(
        *[F.col(f"r.{name}").alias(name) for name in names],
        event_time.alias("event_time"),
        "kafka_partition", "kafka_offset", "kafka_timestamp",
        F.to_date(event_time).alias("event_date"),
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


TABLES = (
    TableSpec("bronze.rsvps_raw", "json_fields_rows", "append", POSITION, ("event_date",),
              date_column="event_date", args=("rsvp_id", "mtime")),
    TableSpec("ops.dlq", "dlq_rows", "append", POSITION, ("dlq_date",), headers=True,
              date_column="dlq_date"),
    TableSpec("silver.rsvps", f"{ROWS}:silver_rows", "merge", ("rsvp_id",), ("event_date",),
              newer="s.event_time_ms > t.event_time_ms OR (s.event_time_ms = t.event_time_ms "
                    "AND s.source_offset >= t.source_offset)", date_column="event_date"),
    TableSpec("gold.rsvp_summaries", f"{ROWS}:gold_rows", "merge", ("key",), ("kind",),
              newer="s.emitted_ms >= t.emitted_ms"),
)
"""The specs, in load order (``loader.tables`` in conf/ says which topic and policy each has)."""
