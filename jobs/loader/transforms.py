"""Pure ``DataFrame -> DataFrame`` transforms from a Kafka read to a table's rows, and their parts.

Input: the Kafka source schema (docs/kafka-source.md). Output: the columns of docs/tables.md, in
order (``select`` is the contract). A pipeline's own transforms (its analyzed records, its
summaries) live with the pipeline and are built from the parts here. Nothing here touches a
session, a reader or a writer.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

KAFKA_POSITION = {"topic": "kafka_topic", "partition": "kafka_partition", "offset": "kafka_offset",
                  "timestamp": "kafka_timestamp"}


def kafka_columns() -> list[Column]:
    """The record's Kafka position: ``kafka_topic``, ``_partition``, ``_offset``, ``_timestamp``."""
    return [F.col(source).alias(name) for source, name in KAFKA_POSITION.items()]


def _ms_to_timestamp(column: Column) -> Column:
    return F.timestamp_millis(column)


def _header(name: str) -> Column:
    """The value (as text) of the first header called ``name``, or null."""
    matching = F.filter(F.coalesce(F.col("headers"), F.array()), lambda h: h["key"] == F.lit(name))
    return F.try_element_at(matching, F.lit(1))["value"].cast("string")


def json_fields_rows(id_field: str, time_field: str) -> Callable[[DataFrame], DataFrame]:
    """Raw records as delivered: original JSON plus its id and epoch-ms time fields and Kafka position.

    ``id_field`` (long) and ``time_field`` are read from the JSON value (null when it is not JSON
    or lacks them); ``event_time`` falls back to the Kafka timestamp, so a bad record is kept.
    """
    def rows(raw: DataFrame) -> DataFrame:
        text = F.col("value").cast("string")
        millis = F.get_json_object(text, f"$.{time_field}").try_cast("long")
        event_time = F.coalesce(_ms_to_timestamp(millis), F.col("timestamp"))
        return raw.select(
            F.get_json_object(text, f"$.{id_field}").try_cast("long").alias(id_field),
            millis.alias(time_field),
            event_time.alias("event_time"),
            text.alias("value"),
            *kafka_columns(),
            F.to_date(event_time).alias("event_date"),
        )

    return rows


def dlq_rows(dlq: DataFrame) -> DataFrame:
    """Dead letters: original bytes, reason headers split into columns (needs headers)."""
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
