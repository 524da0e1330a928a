"""The Kafka source schema and the Arrow record batches the source yields.

The schema is Spark's Kafka source schema (KafkaRecordToRowConverter.scala). Batches are built
column by column from one ``consume()`` result; the Arrow schema comes from
``to_arrow_schema(schema, timezone="UTC")`` so Spark accepts the batches as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

if TYPE_CHECKING:
    from confluent_kafka import Message

HEADERS_TYPE = T.ArrayType(T.StructType([
    T.StructField("key", T.StringType()),
    T.StructField("value", T.BinaryType()),
]))
KAFKA_SCHEMA = T.StructType([
    T.StructField("key", T.BinaryType()),
    T.StructField("value", T.BinaryType()),
    T.StructField("topic", T.StringType()),
    T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType()),
    T.StructField("timestamp", T.TimestampType()),
    T.StructField("timestampType", T.IntegerType()),
])
KAFKA_SCHEMA_WITH_HEADERS = T.StructType([*KAFKA_SCHEMA.fields, T.StructField("headers", HEADERS_TYPE)])
RANGE_SCHEMA = T.StructType([
    T.StructField("topic", T.StringType()),
    T.StructField("partition", T.IntegerType()),
    T.StructField("startOffset", T.LongType()),
    T.StructField("endOffset", T.LongType()),
    T.StructField("continued", T.BooleanType()),
    T.StructField("resumes", T.BooleanType()),
])
"""``emitRanges``: one row per planned offset range instead of its records (docs/kafka-source.md).

``continued``: another task of the same micro-batch reads the partition on from ``endOffset``
(a range cut by ``rangeGroups``); ``resumes``: the piece after such a cut, whose partition another
task reads up to ``startOffset``. A continued piece comes first in its task's rows and the piece
that resumes it last in its own, so what the first piece's reader spills past the cut serves the
second; a reader does not open a resuming piece ahead of time (``prefetchRanges``) for the same
reason.
"""
# librdkafka timestamp types (0 none, 1 create, 2 log append) -> Java TimestampType ids.
_TIMESTAMP_TYPE_IDS = {0: -1, 1: 0, 2: 1}
_MICROS_PER_MILLI = 1000


def kafka_schema(include_headers: bool, emit_ranges: bool = False) -> T.StructType:
    """The source schema, with the ``headers`` column when ``includeHeaders`` is true.

    With ``emitRanges`` the source yields one row per offset range (:data:`RANGE_SCHEMA`).
    """
    if emit_ranges:
        return RANGE_SCHEMA
    return KAFKA_SCHEMA_WITH_HEADERS if include_headers else KAFKA_SCHEMA


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The exact Arrow schema Spark expects from the source's record batches."""
    return to_arrow_schema(kafka_schema(include_headers), timezone="UTC")


def to_record_batch(messages: Sequence[Message], topic: str, partition: int,
                    schema: pa.Schema) -> pa.RecordBatch:
    """Build one record batch from consumed messages of one topic-partition.

    Args:
        messages: data messages (no error events), in offset order.
        topic: their topic.
        partition: their partition.
        schema: :func:`arrow_schema` of the read.
    """
    count = len(messages)
    stamps = [m.timestamp() for m in messages]
    millis = pa.array([stamp[1] for stamp in stamps], pa.int64())
    kinds = [_TIMESTAMP_TYPE_IDS.get(stamp[0], -1) for stamp in stamps]
    columns = [
        pa.array([m.key() for m in messages], pa.binary()),
        pa.array([m.value() for m in messages], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(partition, pa.int32()), count),
        pa.array([m.offset() for m in messages], pa.int64()),
        pc.multiply(millis, _MICROS_PER_MILLI).cast(schema.field("timestamp").type),
        pa.array(kinds, pa.int32()),
    ]
    if len(schema) > len(columns):
        columns.append(pa.array([m.headers() for m in messages], schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
