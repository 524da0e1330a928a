"""The contract both Kafka backends meet through read_kafka / write_kafka.

Parametrised over the backends present: ``python`` (the kafka-py data source) always, ``jvm``
(Spark's spark-sql-kafka-0-10 connector) only where its jar is on the classpath.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import types as T

from jobs.config.load import load_config
from jobs.spark.backends import kafka_jar
from jobs.spark.kafka_io import read_kafka, write_kafka
from tests.integration.kafka.records import expected

JVM_JAR = kafka_jar(load_config("test", environ={})) is not None
JVM_SKIP = ("no spark-sql-kafka-0-10 jar on the Spark classpath: Maven Central is unreachable "
            "where this suite runs, so Spark's JVM Kafka connector cannot be downloaded")
BACKENDS = [pytest.param("python", id="python"),
            pytest.param("jvm", id="jvm", marks=pytest.mark.skipif(not JVM_JAR, reason=JVM_SKIP))]
SOURCE_DDL = ("key binary, value binary, topic string, partition int, offset bigint, "
              "timestamp timestamp, timestampType int, "
              "headers array<struct<key:string,value:binary>>")


@pytest.fixture(params=BACKENDS)
def backend_cfg(request, stack):
    spark_conf = stack.spark.model_copy(update={"kafka_backend": request.param})
    return stack.model_copy(update={"spark": spark_conf})


def test_schema_is_sparks_kafka_schema(spark, backend_cfg, topic_factory):
    topic = topic_factory()
    df = read_kafka(spark, backend_cfg, topics=topic, options={"includeHeaders": "true"})
    assert df.schema.simpleString() == T._parse_datatype_string(SOURCE_DDL).simpleString()


def test_bounded_batch_read(spark, backend_cfg, topic_factory, produce):
    topic = topic_factory()
    records = produce(topic, 15)
    df = read_kafka(spark, backend_cfg, topics=topic, ending={topic: {0: 3, 1: 5, 2: -1}})
    got = sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in df.collect())
    wanted = [r for r in records if r.offset < {0: 3, 1: 5, 2: 5}[r.partition]]
    assert got == expected(wanted)


def test_available_now_stream_in_bounded_batches(spark, backend_cfg, topic_factory, produce,
                                                 checkpoint, run_available_now):
    topic = topic_factory()
    records = produce(topic, 45)
    df = read_kafka(spark, backend_cfg, topics=topic, stream=True,
                    options={"maxOffsetsPerTrigger": 20})
    run = run_available_now(df, checkpoint)
    assert run.rows == expected(records)
    assert len([p for p in run.progress if p["numInputRows"]]) >= 3


def test_write_then_read_back_with_headers(spark, backend_cfg, kafka_props, topic_factory):
    topic = topic_factory(partitions=1)
    rows = [("k1", "v1", [("h", b"1")]), ("k2", "v2", None)]
    df = spark.createDataFrame(rows, "key string, value string, "
                                     "headers array<struct<key:string,value:binary>>")
    write_kafka(df, backend_cfg, topic=topic)
    consumer = Consumer({**kafka_props, "group.id": f"contract-{topic}"})
    high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(topic, 0, 0)])
    found, position, deadline = [], 0, time.monotonic() + 20
    while position < high and time.monotonic() < deadline:  # everything, extra copies included
        for m in consumer.consume(100, timeout=0.5):
            position = m.offset() + 1
            found.append((m.key(), m.value(), m.headers()))
    consumer.close()
    assert sorted(found, key=repr) == [(b"k1", b"v1", [("h", b"1")]), (b"k2", b"v2", None)]
