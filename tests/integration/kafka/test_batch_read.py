"""Bounded reads return exactly the records asked for (earliest, offsets, timestamps)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pyspark.errors import PySparkException

from jobs.spark.kafka_io import read_kafka
from tests.integration.kafka.records import expected


def rows(df) -> list[tuple]:
    return sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in df.collect())


def test_earliest_to_latest_reads_every_record_with_kafka_metadata(spark, cfg, topic_factory,
                                                                  produce, now_ms):
    topic = topic_factory()
    records = produce(topic, 12, ts=lambda i: now_ms - 60_000 + i)
    df = read_kafka(spark, cfg, topics=topic)
    collected = df.collect()
    assert sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in collected) == \
        expected(records)
    by_position = {(r.partition, r.offset): r for r in collected}
    for record in records:
        row = by_position[(record.partition, record.offset)]
        assert row.topic == topic
        assert row.timestampType == 0
        assert row.timestamp.replace(tzinfo=UTC) == datetime.fromtimestamp(
            record.timestamp_ms / 1000, UTC)
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                          "timestampType"]


def test_per_partition_offsets_bound_exactly_the_requested_range(spark, cfg, topic_factory,
                                                                 produce):
    topic = topic_factory()
    records = produce(topic, 30)
    starting = {topic: {0: 2, 1: -2, 2: 5}}
    ending = {topic: {0: 6, 1: 3, 2: -1}}
    df = read_kafka(spark, cfg, topics=topic, starting=starting, ending=ending)
    bounds = {0: (2, 6), 1: (0, 3), 2: (5, 10)}
    wanted = [r for r in records if bounds[r.partition][0] <= r.offset < bounds[r.partition][1]]
    assert len(wanted) == 4 + 3 + 5
    assert rows(df) == expected(wanted)


def test_timestamps_start_and_end_a_read(spark, cfg, topic_factory, produce, now_ms):
    topic = topic_factory()
    base = now_ms - 120_000
    records = produce(topic, 30, ts=lambda i: base + i * 1000)
    start = datetime.fromtimestamp((base + 9_500) / 1000, UTC)
    end = datetime.fromtimestamp((base + 21_000) / 1000, UTC)
    df = read_kafka(spark, cfg, topics=topic, starting=start, ending=end)
    wanted = [r for r in records if base + 9_500 <= r.timestamp_ms < base + 21_000]
    assert sorted(r.value for r in wanted) == sorted(f"r{i}".encode() for i in range(10, 21))
    assert rows(df) == expected(wanted)


def test_starting_offsets_by_timestamp_per_partition(spark, cfg, topic_factory, produce, now_ms):
    topic = topic_factory()
    base = now_ms - 120_000
    records = produce(topic, 30, ts=lambda i: base + i * 1000)
    per_partition = {"0": base, "1": base + 25_000, "2": base + 3_000}
    df = (spark.read.format("kafka-py")
          .option("kafka.bootstrap.servers", cfg.kafka.bootstrap_servers)
          .option("subscribe", topic)
          .option("startingOffsetsByTimestamp", f'{{"{topic}": {{"0": {base}, "1": {base + 25_000}, '
                                                f'"2": {base + 3_000}}}}}')
          .load())
    wanted = [r for r in records if r.timestamp_ms >= per_partition[str(r.partition)]]
    assert rows(df) == expected(wanted)


def test_headers_are_read_when_asked(spark, cfg, topic_factory, produce):
    topic = topic_factory(partitions=1)
    records = produce(topic, 3, partitions=1, headers=True)
    df = read_kafka(spark, cfg, topics=topic, options={"includeHeaders": "true"})
    got = {r.offset: [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers]
           for r in df.collect()}
    assert got == {r.offset: [tuple(h) for h in r.headers] for r in records}


def test_pattern_subscription_reads_matching_topics_only(spark, cfg, topic_factory, produce):
    first, second = topic_factory(prefix="pat"), topic_factory(prefix="pat")
    other = topic_factory(prefix="nopat")
    produce(first, 3)
    produce(second, 4)
    produce(other, 5)
    df = read_kafka(spark, cfg, pattern=f"pat\\.({first[4:]}|{second[4:]})")
    counts = {r.topic: r["count"] for r in df.groupBy("topic").count().collect()}
    assert counts == {first: 3, second: 4}


@pytest.mark.parametrize(("options", "fragment"), [
    ({"startingOffsets": "latest"}, "option 'startingOffsets' is 'latest'"),
    ({"endingOffsets": "earliest"}, "option 'endingOffsets' is 'earliest'"),
    ({"startingOffsets": '{"TOPIC": {"0": 0}}'}, "must list every topic-partition"),
    ({"startingOffset": "earliest"}, "did you mean 'startingoffsets'"),
    ({"failOnDataLoss": "maybe"}, "option 'failOnDataLoss' is 'maybe'"),
    ({"kafka.auto.offset.reset": "earliest"}, "'kafka.auto.offset.reset' is not supported"),
])
def test_bad_options_fail_naming_option_and_value(spark, cfg, topic_factory, options, fragment):
    topic = topic_factory()
    options = {key: value.replace("TOPIC", topic) for key, value in options.items()}
    with pytest.raises(PySparkException) as info:
        read_kafka(spark, cfg, topics=topic, options=options).collect()
    assert fragment in str(info.value)
    assert "KafkaSourceError" in str(info.value)


def test_timestamp_after_the_last_record_errors_or_reads_nothing(spark, cfg, topic_factory,
                                                                 produce, now_ms):
    topic = topic_factory()
    produce(topic, 6, ts=lambda i: now_ms - 10_000 + i)
    future = datetime.fromtimestamp((now_ms + 3_600_000) / 1000, UTC)
    with pytest.raises(PySparkException) as info:
        read_kafka(spark, cfg, topics=topic, starting=future).collect()
    assert "no record at or after timestamp" in str(info.value)
    empty = read_kafka(spark, cfg, topics=topic, starting=future,
                       options={"startingOffsetsByTimestampStrategy": "latest"})
    assert empty.count() == 0


def test_assign_reads_only_the_listed_partitions(spark, cfg, topic_factory, produce):
    topic = topic_factory()
    records = produce(topic, 12)
    df = (spark.read.format("kafka-py")
          .option("kafka.bootstrap.servers", cfg.kafka.bootstrap_servers)
          .option("assign", f'{{"{topic}": [0, 2]}}').load())
    assert rows(df) == expected([r for r in records if r.partition in (0, 2)])
