"""Pure ``DataFrame -> DataFrame`` transforms from a pipeline's Kafka reads to its tables' rows.

Factories of the loader's transforms (``TableSpec.transform`` ``module:factory`` with plain
arguments, so a spec travels to the Spark service): raw records (bronze), analyzed records
(silver) and dead letters (ops). Every table's partition column is the UTC date of the record's
event time (bronze, silver) or of the dead letter (ops), named as the table declares it.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.loader.transforms import dlq_rows, kafka_columns, latest_per

MS_PER_DAY = 86_400_000
KAFKA_READ = ("kafka_partition", "kafka_offset", "kafka_timestamp")


def utc_date(millis: Column) -> Column:
    """The UTC date of epoch milliseconds (whatever the session's time zone)."""
    return F.date_from_unix_date(F.floor(millis / MS_PER_DAY).cast("int"))


def raw_rows(event_field: str, date_column: str) -> Callable[[DataFrame], DataFrame]:
    """Source records as delivered: key and value as text, the event time if the value says it.

    ``event_field`` is read from a JSON value (null when the value is not JSON or lacks it); the
    date falls back to the Kafka timestamp, so a bad record is kept, not fatal.
    """
    def rows(raw: DataFrame) -> DataFrame:
        text = F.col("value").cast("string")
        event_ms = F.get_json_object(text, f"$.{event_field}").try_cast("long")
        return raw.select(
            F.col("key").cast("string").alias("key"),
            event_ms.alias(event_field),
            text.alias("value"),
            *kafka_columns(),
            utc_date(F.coalesce(event_ms, F.unix_millis(F.col("timestamp")))).alias(date_column),
        )

    return rows


def dead_letter_rows(date_column: str) -> Callable[[DataFrame], DataFrame]:
    """Dead letters as the loader's ``dlq_rows``, their date column named ``date_column``."""
    def rows(dlq: DataFrame) -> DataFrame:
        return dlq.transform(dlq_rows).withColumnRenamed("dlq_date", date_column)

    return rows


def analyzed_rows(schema_ddl: str, keys: tuple[str, ...], event_field: str,
                  date_column: str) -> Callable[[DataFrame], DataFrame]:
    """Analyzed records parsed with ``schema_ddl``; one row per ``keys``.

    The row kept is the latest by event time, then source offset; of a record delivered twice,
    the first delivery.

    ``schema_ddl`` is the analyzed record's schema with the engine's fields (Spark DDL).
    """
    schema = T.StructType.fromDDL(schema_ddl)
    assert isinstance(schema, T.StructType)
    names = [field.name for field in schema.fields]
    latest = latest_per(list(keys), [F.desc_nulls_last(event_field), F.desc("source_offset"),
                                     F.asc("kafka_offset")])

    def rows(analyzed: DataFrame) -> DataFrame:
        parsed = analyzed.select(F.from_json(F.col("value").cast("string"), schema).alias("r"),
                                 *kafka_columns())
        return parsed.select(
            *[F.col(f"r.`{name}`").alias(name) for name in names],
            *KAFKA_READ,
            utc_date(F.col(f"r.`{event_field}`")).alias(date_column),
        ).transform(latest)

    return rows
