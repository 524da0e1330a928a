"""The sink writes keys, values, headers and partitions; any delivery error fails the batch."""

from __future__ import annotations

import os
import re
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic
from pyspark.errors import PySparkException, StreamingQueryException
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.spark.kafka_io import read_kafka, write_kafka

HEADERS = T.ArrayType(T.StructType([T.StructField("key", T.StringType()),
                                    T.StructField("value", T.BinaryType())]))
SCHEMA = T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType()),
                       T.StructField("headers", HEADERS), T.StructField("partition", T.IntegerType())])


def consume_all(kafka_props, topic: str, count: int, partitions: int = 3) -> list[tuple]:
    """(partition, key, value, headers) of every record up to the high watermarks.

    Waits until the topic holds at least ``count`` records, then reads all of them: extra
    copies show up in the comparison instead of being left unread.
    """
    consumer = Consumer({**kafka_props, "group.id": f"check-{topic}", "enable.auto.commit": False,
                         "receive.message.max.bytes": 1_000_000_000})
    found: list[tuple] = []
    deadline = time.monotonic() + 30
    try:
        highs = _highs(consumer, topic, partitions)
        while sum(highs.values()) < count and time.monotonic() < deadline:
            time.sleep(0.2)
            highs = _highs(consumer, topic, partitions)
        positions = dict.fromkeys(highs, 0)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        while any(positions[p] < highs[p] for p in highs):
            assert time.monotonic() < deadline, f"{topic}: read {len(found)} of {sum(highs.values())}"
            for msg in consumer.consume(1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                positions[msg.partition()] = msg.offset() + 1
                found.append((msg.partition(), msg.key(), msg.value(), msg.headers()))
    finally:
        consumer.close()
    return sorted(found, key=repr)


def _highs(consumer, topic: str, partitions: int) -> dict[int, int]:
    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)}


def test_batch_write_round_trips_keys_values_headers_and_partitions(spark, cfg, kafka_props,
                                                                   topic_factory):
    topic = topic_factory()
    rows = [("a", b"\x00\x01", [("trace", b"t1"), ("none", None)], 2),
            (None, b"no key", None, 0),
            ("c", b"", [("h", b"")], 1)]
    write_kafka(spark.createDataFrame(rows, SCHEMA), cfg, topic=topic)
    assert consume_all(kafka_props, topic, 3) == sorted([
        (2, b"a", b"\x00\x01", [("trace", b"t1"), ("none", None)]),
        (0, None, b"no key", None),
        (1, b"c", b"", [("h", b"")]),
    ], key=repr)


def test_headers_are_written_without_a_partition_column(spark, cfg, kafka_props, topic_factory):
    topic = topic_factory(partitions=1)
    df = spark.createDataFrame([("k1", b"v1", [("trace", b"t1")]), ("k2", b"v2", None)],
                               "key string, value binary, headers array<struct<key:string,value:binary>>")
    write_kafka(df, cfg, topic=topic)
    assert consume_all(kafka_props, topic, 2, partitions=1) == [
        (0, b"k1", b"v1", [("trace", b"t1")]), (0, b"k2", b"v2", None)]


def test_topic_column_routes_rows_and_string_values_are_utf8(spark, cfg, kafka_props, topic_factory):
    first, second = topic_factory(partitions=1), topic_factory(partitions=1)
    df = spark.createDataFrame([(first, "k1", "één"), (second, "k2", "two"), (first, "k3", "three")],
                               "topic string, key string, value string")
    write_kafka(df, cfg)
    assert consume_all(kafka_props, first, 2, partitions=1) == sorted([
        (0, b"k1", "één".encode(), None), (0, b"k3", b"three", None)], key=repr)
    assert consume_all(kafka_props, second, 1, partitions=1) == [(0, b"k2", b"two", None)]


def test_streaming_source_to_sink_round_trip(spark, cfg, kafka_props, topic_factory, produce,
                                             checkpoint):
    source, target = topic_factory(), topic_factory()
    records = produce(source, 24)
    upper = (read_kafka(spark, cfg, topics=source, stream=True, options={"maxOffsetsPerTrigger": 9})
             .select("key", F.upper(F.col("value").cast("string")).alias("value"), "partition"))
    query = write_kafka(upper, cfg, topic=target, checkpoint=checkpoint,
                        trigger={"availableNow": True})
    assert query.awaitTermination(120)
    assert consume_all(kafka_props, target, 24) == sorted(
        [(r.partition, r.key, r.value.upper(), None) for r in records], key=repr)


def test_the_sink_compresses_a_record_past_a_topic_limit_its_raw_size_would_break(
        spark, cfg, admin, kafka_props, topic_factory):
    """lz4 by default (as the collector): 5,000 repeated bytes go into a 2,000-byte topic."""
    topic = f"small.{topic_factory()}"
    admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "2000"})])[topic].result(15)
    write_kafka(spark.createDataFrame([("big", b"x" * 5000)], "key string, value binary"), cfg, topic=topic)
    assert consume_all(kafka_props, topic, 1, partitions=1) == [(0, b"big", b"x" * 5000, None)]


def test_a_delivery_failure_fails_the_batch(spark, cfg, admin, topic_factory, checkpoint):
    topic = f"small.{topic_factory()}"
    admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "2000"})])[topic].result(15)
    # random bytes: the sink compresses (lz4), and 5,000 repeated bytes would fit in 2,000
    df = (spark.createDataFrame([("ok", b"x" * 10), ("big", os.urandom(5000))], "key string, value binary")
          .coalesce(1))  # one task writes both rows; the broker may refuse their whole batch
    with pytest.raises(PySparkException) as info:
        write_kafka(df, cfg, topic=topic)
    assert re.search(r"[12] of 2 record\(s\) failed delivery to Kafka, first error: Broker: Message size "
                     r"too large", str(info.value)), str(info.value)[-600:]
    assert "MSG_SIZE_TOO_LARGE" in str(info.value)

    stream = (spark.readStream.format("rate").option("rowsPerSecond", 5).load()
              .select(F.col("value").cast("string").alias("key"),
                      # 80 SHA-256 hex digests: 5,120 bytes that lz4 cannot bring under 2,000
                      F.expr("concat_ws('', transform(sequence(1, 80), "
                             "i -> sha2(cast(value * 100 + i as string), 256)))").alias("value")))
    query = write_kafka(stream, cfg, topic=topic, checkpoint=checkpoint)
    try:
        with pytest.raises(StreamingQueryException, match="failed delivery to Kafka"):
            query.awaitTermination(60)
    finally:
        query.stop()


@pytest.mark.parametrize(("ddl", "topic", "fragment"), [
    ("key string, value string", None, "no 'topic' column in (key string, value string)"),
    ("key string, payload string", "t", "required column 'value' not found"),
    ("key int, value string", "t", "column 'key' is int, expected string or binary"),
    ("value string, headers array<string>", "t", "column 'headers' is array<string>"),
    ("value string, topic int", None, "column 'topic' is int, expected string"),
])
def test_bad_columns_fail_before_writing(spark, cfg, ddl, topic, fragment):
    df = spark.createDataFrame([], ddl)
    with pytest.raises(PySparkException) as info:
        write_kafka(df, cfg, topic=topic)
    assert fragment in str(info.value)


def test_a_null_topic_fails_the_write(spark, cfg, topic_factory):
    topic = topic_factory(partitions=1)
    df = spark.createDataFrame([(topic, "v1"), (None, "v2")], "topic string, value string")
    with pytest.raises(PySparkException, match="a row has a null 'topic'"):
        write_kafka(df, cfg)
