"""Streaming reads: bounded micro-batches, restarts, new partitions, replays, group commits."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewPartitions

from jobs.kafka.groups import commit_final_offsets
from jobs.spark.kafka_io import read_kafka
from tests.integration.kafka.records import expected


def test_max_offsets_per_trigger_with_available_now_runs_several_bounded_batches(
        spark, cfg, topic_factory, produce, checkpoint, run_available_now):
    topic = topic_factory()
    records = produce(topic, 90)
    df = read_kafka(spark, cfg, topics=topic, stream=True, options={"maxOffsetsPerTrigger": 20})
    run = run_available_now(df, checkpoint)
    assert run.rows == expected(records)
    sizes = [p["numInputRows"] for p in run.progress if p["numInputRows"]]
    assert len(sizes) >= 5, sizes
    assert max(sizes) <= 20 and sum(sizes) == 90


def test_restart_resumes_after_the_last_committed_batch(spark, cfg, topic_factory, produce,
                                                       checkpoint, run_available_now):
    topic = topic_factory()
    first = produce(topic, 30)
    df = read_kafka(spark, cfg, topics=topic, stream=True)
    assert run_available_now(df, checkpoint).rows == expected(first)
    second = produce(topic, 15, start=30)
    assert run_available_now(df, checkpoint).rows == expected(second)
    assert run_available_now(df, checkpoint).rows == []


def test_latest_start_is_kept_across_runs_and_reads_only_new_records(
        spark, cfg, topic_factory, produce, checkpoint, run_available_now):
    topic = topic_factory()
    produce(topic, 9)
    df = read_kafka(spark, cfg, topics=topic, starting="latest", stream=True, checkpoint=checkpoint)
    assert run_available_now(df, checkpoint).rows == []
    new = produce(topic, 6, start=9)
    assert run_available_now(df, checkpoint).rows == expected(new)


def test_new_partitions_are_picked_up_from_earliest(spark, cfg, admin, topic_factory, produce,
                                                   checkpoint, run_available_now):
    topic = topic_factory(partitions=2)
    before = produce(topic, 6, partitions=2)
    df = read_kafka(spark, cfg, topics=topic, stream=True)
    assert run_available_now(df, checkpoint).rows == expected(before)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(15)
    after = produce(topic, 9, start=6, partitions=3)
    assert {r.partition for r in after} == {0, 1, 2}
    assert run_available_now(df, checkpoint).rows == expected(after)


def test_ending_offsets_bound_a_streaming_replay(spark, cfg, topic_factory, produce, checkpoint,
                                                run_available_now):
    topic = topic_factory()
    records = produce(topic, 60)
    df = read_kafka(spark, cfg, topics=topic, stream=True, starting={topic: {0: 5, 1: 0, 2: 10}},
                    ending={topic: {0: 15, 1: 4, 2: 20}}, options={"maxOffsetsPerTrigger": 8})
    run = run_available_now(df, checkpoint)
    bounds = {0: (5, 15), 1: (0, 4), 2: (10, 20)}
    assert run.rows == expected([r for r in records
                                 if bounds[r.partition][0] <= r.offset < bounds[r.partition][1]])
    assert len([p for p in run.progress if p["numInputRows"]]) >= 3


def test_processed_offsets_are_committed_to_a_consumer_group(spark, cfg, kafka_props,
                                                            topic_factory, produce, checkpoint,
                                                            run_available_now):
    topic = topic_factory()
    produce(topic, 30)
    group = f"lag.{topic}"
    df = read_kafka(spark, cfg, topics=topic, stream=True,
                    options={"maxOffsetsPerTrigger": 15, "commitOffsetsToGroup": group})
    run = run_available_now(df, checkpoint)
    assert len([p for p in run.progress if p["numInputRows"]]) == 2
    assert committed(kafka_props, group, topic) == {0: 5, 1: 5, 2: 5}
    final = commit_final_offsets(run.query.lastProgress, kafka_props, group)
    assert final == {(topic, 0): 10, (topic, 1): 10, (topic, 2): 10}
    assert committed(kafka_props, group, topic) == {0: 10, 1: 10, 2: 10}


def committed(kafka_props, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({**kafka_props, "group.id": group})
    try:
        offsets = consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        return {tp.partition: tp.offset for tp in offsets}
    finally:
        consumer.close()


def test_emit_ranges_yields_the_planned_ranges_instead_of_records(
        spark, cfg, topic_factory, produce, checkpoint, run_available_now):
    topic = topic_factory()
    produce(topic, 60)  # 20 per partition
    df = read_kafka(spark, cfg, topics=topic, stream=True, starting={topic: {0: 5, 1: 0, 2: 12}},
                    options={"maxOffsetsPerTrigger": 30, "emitRanges": "true"})
    assert df.columns == ["topic", "partition", "startOffset", "endOffset", "continued", "resumes"]
    run = run_available_now(df, checkpoint, columns=("partition", "startOffset", "endOffset"))
    # Every offset from the start to the end of each partition in exactly one range, no range
    # empty, 43 offsets over micro-batches of at most 30.
    covered = {p: [o for q, first, last in run.rows if q == p for o in range(first, last)] for p in range(3)}
    assert covered == {0: list(range(5, 20)), 1: list(range(20)), 2: list(range(12, 20))}
    assert all(last > first for _, first, last in run.rows)
    sizes = [p["numInputRows"] for p in run.progress if p["numInputRows"]]
    assert len(sizes) >= 2 and sum(sizes) <= 6, sizes  # rows are ranges: 43 offsets, 30 per batch
    batch = read_kafka(spark, cfg, topics=topic, starting={topic: {0: 5, 1: 0, 2: 12}},
                       ending={topic: {0: 6, 1: 20, 2: 12}}, options={"emitRanges": "true"})
    assert sorted(tuple(r) for r in batch.collect()) == [(topic, 0, 5, 6, False, False),
                                                                (topic, 1, 0, 20, False, False)]
