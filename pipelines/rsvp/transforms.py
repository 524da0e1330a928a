"""Pure transforms of the RSVP stream: parse and validate, analyzed records, dead letters.

Every function here is ``DataFrame -> DataFrame`` (or a factory of one) and never touches a
SparkSession, a reader or a writer. Each is a ``mapInArrow`` over the plain-Python functions of
:mod:`pipelines.rsvp.validate` and :mod:`pipelines.rsvp.records`, the same functions the job's
per-task pass calls (:mod:`jobs.streaming.task`), so a DataFrame built here holds exactly what
the job writes. Input is a DataFrame of Spark's Kafka source schema (``key``, ``value``,
``topic``, ``partition``, ``offset``, ``timestamp``); the output contracts are in
docs/streaming.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from jobs.streaming.dead_letters import MAX_DLQ_VALUE_BYTES
from jobs.streaming.task import kafka_millis
from pipelines.rsvp import schema
from pipelines.rsvp.records import ANALYZED_SCHEMA_VERSION
from pipelines.rsvp.validate import Rules

__all__ = ["ANALYZED_SCHEMA", "ANALYZED_SCHEMA_VERSION", "MAX_DLQ_VALUE_BYTES", "Rules", "analyzed",
           "analyzed_records", "dead_letters", "flag_late", "invalid", "parse_rsvps", "reason_code", "valid"]

Transform = Callable[[DataFrame], DataFrame]
ArrowFunction = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]

ANALYZED_SCHEMA = (
    "schema_version int, rsvp_id long, event_time_ms long, event_time string, event_id string, "
    "event_name string, group_id long, group_name string, member_id long, response string, "
    "guests long, topics array<string>, city string, country string, state string, lat double, "
    "lon double, venue_id long, source_topic string, source_partition int, source_offset long, "
    "kafka_timestamp_ms long, ingest_lag_ms long, late boolean")
_ARROW_TYPES = {"int": pa.int32(), "long": pa.int64(), "string": pa.string(), "double": pa.float64(),
                "boolean": pa.bool_(), "array<string>": pa.list_(pa.string())}
ANALYZED_ARROW = pa.schema([(name, _ARROW_TYPES[kind]) for name, kind in
                            (column.split(" ", 1) for column in ANALYZED_SCHEMA.split(", "))])
SINK_SCHEMA = "topic string, key binary, value binary"
DEFAULT_RULES = Rules()
DLQ_SCHEMA = f"{SINK_SCHEMA}, headers array<struct<key:string,value:binary>>"


def _parse_batches(rules: Rules, out_schema: T.StructType) -> ArrowFunction:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import msgspec
        from pyspark.sql.pandas.types import to_arrow_type

        from pipelines.rsvp.validate import parse

        rsvp_type = to_arrow_type(out_schema["rsvp"].dataType)
        for batch in batches:
            parsed = [parse(value, ms, rules) for value, ms in
                      zip(batch.column("value").to_pylist(), kafka_millis(batch), strict=True)]
            rsvps = [msgspec.to_builtins(r) if r is not None else None for r, _ in parsed]
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, pa.array(rsvps, type=rsvp_type),
                 pa.array([reason for _, reason in parsed], type=pa.string())],
                names=[*batch.schema.names, "rsvp", "reason"])

    return run


def parse_rsvps(rules: Rules = DEFAULT_RULES) -> Transform:
    """Add ``rsvp`` (the typed record, null when invalid) and ``reason`` (null when valid).

    Reasons, first match wins: ``oversize``, ``too_deep``/``number_too_long``, ``invalid_json``,
    ``not_an_object``, ``wrong_type``, ``missing_field``, ``invalid_value``, ``bad_event_time``
    (codes in pipelines/rsvp/schema.py; format ``<code>: <detail>``).
    """

    def transform(df: DataFrame) -> DataFrame:
        out = T.StructType([*df.schema.fields, T.StructField("rsvp", schema.to_struct_type()),
                            T.StructField("reason", T.StringType())])
        return df.mapInArrow(_parse_batches(rules, out), out)

    return transform


def valid(df: DataFrame) -> DataFrame:
    """Rows of a parsed DataFrame that passed every rule."""
    return df.where(F.col("reason").isNull())


def invalid(df: DataFrame) -> DataFrame:
    """Rows of a parsed DataFrame that go to the dead-letter topic."""
    return df.where(F.col("reason").isNotNull())


def flag_late(grace_ms: int) -> Transform:
    """Add ``late`` to parsed rows: the stream-time rule (docs/streaming.md, "Late records").

    A valid row is late when its event time is more than ``grace_ms`` below the largest event
    time of the valid rows before it in its topic-partition (by offset). The input holds each
    topic-partition from its first record, as a rebuild reads it.
    """

    def transform(df: DataFrame) -> DataFrame:
        before = Window.partitionBy("topic", "partition").orderBy("offset").rowsBetween(
            Window.unboundedPreceding, -1)
        is_valid = F.col("reason").isNull()
        stream_ms = F.max(F.when(is_valid, F.col("rsvp.mtime"))).over(before)
        is_late = is_valid & stream_ms.isNotNull() & (F.col("rsvp.mtime") < stream_ms - F.lit(grace_ms))
        return df.withColumn("late", F.coalesce(is_late, F.lit(False)))

    return transform


def _analyze_batches() -> ArrowFunction:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import msgspec

        from pipelines.rsvp.records import analyzed as analyze
        from pipelines.rsvp.validate import Rsvp

        for batch in batches:
            rows = zip(batch.column("rsvp").to_pylist(), batch.column("topic").to_pylist(),
                       batch.column("partition").to_pylist(), batch.column("offset").to_pylist(),
                       kafka_millis(batch), batch.column("late").to_pylist(), strict=True)
            records = [analyze(msgspec.convert(rsvp, Rsvp), topic, partition, offset, ms, late=late)
                       for rsvp, topic, partition, offset, ms, late in rows]
            if records:
                yield pa.RecordBatch.from_pylist(records, schema=ANALYZED_ARROW)

    return run


def analyzed() -> Transform:
    """Valid parsed rows with ``late`` (:func:`flag_late`) -> the analyzed columns (version 1)."""

    def transform(df: DataFrame) -> DataFrame:
        needed = df.select("rsvp", "topic", "partition", "offset", "timestamp", "late")
        return needed.mapInArrow(_analyze_batches(), ANALYZED_SCHEMA)

    return transform


def _record_batches(topic: str) -> ArrowFunction:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pipelines.rsvp.records import ANALYZED_COLUMNS, analyzed_value

        for batch in batches:
            rows = batch.select(list(ANALYZED_COLUMNS)).to_pylist()
            yield pa.RecordBatch.from_pydict({
                "topic": [topic] * len(rows), "key": [row["event_id"].encode() for row in rows],
                "value": [analyzed_value(row) for row in rows]},
                schema=pa.schema([("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary())]))

    return run


def analyzed_records(topic: str) -> Transform:
    """Analyzed rows -> Kafka sink columns: key ``event_id``, value the JSON record."""

    def transform(df: DataFrame) -> DataFrame:
        return df.mapInArrow(_record_batches(topic), SINK_SCHEMA)

    return transform


def _dead_letter_batches(topic: str) -> ArrowFunction:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from jobs.streaming.dead_letters import dead_letter_headers, dead_letter_value

        header = pa.struct([("key", pa.string()), ("value", pa.binary())])
        for batch in batches:
            rows = batch.select(["key", "value", "topic", "partition", "offset", "reason"]).to_pylist()
            headers = [[{"key": k, "value": v} for k, v in dead_letter_headers(
                row["reason"], row["topic"], row["partition"], row["offset"],
                len(row["value"]) if row["value"] is not None else 0)] for row in rows]
            yield pa.RecordBatch.from_arrays(
                [pa.array([topic] * len(rows), pa.string()), pa.array([r["key"] for r in rows], pa.binary()),
                 pa.array([dead_letter_value(r["value"]) for r in rows], pa.binary()),
                 pa.array(headers, pa.list_(header))],
                names=["topic", "key", "value", "headers"])

    return run


def dead_letters(topic: str) -> Transform:
    """Invalid parsed rows -> Kafka sink columns: the original bytes and reason headers."""

    def transform(df: DataFrame) -> DataFrame:
        return df.mapInArrow(_dead_letter_batches(topic), DLQ_SCHEMA)

    return transform


def reason_code(df: DataFrame) -> DataFrame:
    """Add ``reason_code``: the text of ``reason`` before the first colon."""
    return df.withColumn("reason_code", F.substring_index("reason", ":", 1))
