"""Executor consumers are pooled across micro-batches and reads stay exactly once.

The pool lives in each Python worker process; a small Python data source (defined inside the
test, so Spark ships it by value) runs tasks on the same reused workers and reports each
worker's ``consumer_pool().stats(topic)``.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from jobs.kafka.consumer import consumer_pool, read_range, read_ranges
from jobs.kafka.offsets import OffsetRange
from jobs.kafka.options import parse_source_options
from jobs.spark.kafka_io import read_kafka
from tests.integration.kafka.records import expected

STATS_TASKS = 8
FIELDS = ("created", "reuse", "skip", "seek", "assign", "closed_error")


def pool_stats(spark, topic: str) -> dict[str, int]:
    """The topic's pool counters summed over every worker process the stats tasks reached."""

    class PoolStatsReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(STATS_TASKS)]

        def read(self, partition: InputPartition) -> Iterator[tuple]:
            import os

            from jobs.kafka.consumer import consumer_pool

            stats = consumer_pool().stats(self.topic)
            yield (os.getpid(), *(stats[name] for name in FIELDS))

    class PoolStatsSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "kafka-pool-stats"

        def schema(self) -> str:
            return "pid int, " + ", ".join(f"{name} int" for name in FIELDS)

        def reader(self, schema) -> DataSourceReader:
            reader = PoolStatsReader()
            reader.topic = self.options["topic"]
            return reader

    spark.dataSource.register(PoolStatsSource)
    rows = spark.read.format("kafka-pool-stats").option("topic", topic).load().collect()
    per_worker = {row["pid"]: row for row in rows}
    return {name: sum(row[name] for row in per_worker.values()) for name in FIELDS}


def partition_offsets(batches) -> list[tuple[int, int]]:
    """(partition, offset) of every record of the batches, in their order."""
    return [(p, o) for batch in batches
            for p, o in zip(batch.column("partition").to_pylist(), batch.column("offset").to_pylist(),
                            strict=True)]


def read_with_pool_at_first(topic: str, batches) -> tuple[list[tuple[int, int]], dict[str, int]]:
    """Every (partition, offset) read, and the pool's stats while the first batch was in hand."""
    try:
        first = next(batches)
        while_first = consumer_pool().stats(topic)
        rest = list(batches)
    finally:
        consumer_pool().clear()
    return partition_offsets([first, *rest]), while_first


def read_240_in_batches_of_30(spark, cfg, topic_factory, produce, checkpoint, run_available_now,
                              options: dict[str, object]) -> tuple[list[dict], dict[str, int], int]:
    """240 records read exactly once in micro-batches of 30: (batches, pool counters, leases)."""
    topic = topic_factory()
    records = produce(topic, 240)
    df = read_kafka(spark, cfg, topics=topic, stream=True, options={"maxOffsetsPerTrigger": 30, **options})
    run = run_available_now(df, checkpoint)
    assert run.rows == expected(records)
    batches = [p for p in run.progress if p["numInputRows"]]
    assert len(batches) >= 8 and sum(p["numInputRows"] for p in batches) == 240
    stats = pool_stats(spark, topic)
    return batches, stats, stats["reuse"] + stats["skip"] + stats["seek"] + stats["assign"]


def test_micro_batches_reuse_pooled_consumers_and_read_every_record_once(
        spark, cfg, topic_factory, produce, checkpoint, run_available_now):
    # The fetch spill (next test) would serve most ranges without a lease: off, to see the pool.
    batches, stats, leases = read_240_in_batches_of_30(
        spark, cfg, topic_factory, produce, checkpoint, run_available_now, {"fetchSpill.maxBytes": 0})
    assert stats["closed_error"] == 0, stats
    assert leases <= 3 * len(batches), stats
    assert stats["reuse"] + stats["skip"] >= len(batches), stats
    assert stats["assign"] == stats["created"] <= 3 * STATS_TASKS, stats


def test_the_fetch_spill_serves_later_micro_batches_in_any_worker(
        spark, cfg, topic_factory, produce, checkpoint, run_available_now, tmp_path):
    spill = tmp_path / "spill"
    batches, stats, leases = read_240_in_batches_of_30(
        spark, cfg, topic_factory, produce, checkpoint, run_available_now, {"fetchSpill.dir": str(spill)})
    # The embedded broker answers the first fetch of each partition with all of it: the rest
    # of every partition is spilled then, and the later ranges never lease a consumer.
    assert stats["closed_error"] == 0 and leases < len(batches), (stats, len(batches))
    assert not list(spill.glob("*.arrow")), "every spill file is removed once read to its end"
    assert not list(spill.glob("*.read~*")), "and the marks of its reads with it"


def test_a_replay_of_earlier_offsets_in_a_warm_pool_reads_every_record_once(
        spark, cfg, topic_factory, produce, tmp_path, run_available_now):
    topic = topic_factory()
    records = produce(topic, 60)
    df = read_kafka(spark, cfg, topics=topic, stream=True, options={"maxOffsetsPerTrigger": 20})
    assert run_available_now(df, str(tmp_path / "first")).rows == expected(records)
    replay = read_kafka(spark, cfg, topics=topic, stream=True, starting={topic: {0: 5, 1: 0, 2: 12}},
                        options={"maxOffsetsPerTrigger": 20})
    starts = {0: 5, 1: 0, 2: 12}
    assert run_available_now(replay, str(tmp_path / "replay")).rows == expected(
        [r for r in records if r.offset >= starts[r.partition]])
    # Which Python worker runs which task is Spark's choice (its idle workers are served in
    # turn), so whether a replay's task meets the consumer it needs is left to the next test.
    assert pool_stats(spark, topic)["closed_error"] == 0


def test_a_pooled_consumer_seeks_back_for_earlier_offsets(cfg, topic_factory, produce):
    """The pool of this process, driven directly: after reading 0..20, a read of 5..12 seeks."""
    topic = topic_factory(partitions=1)
    records = produce(topic, 20, partitions=1)
    options = parse_source_options({"kafka.bootstrap.servers": cfg.kafka.bootstrap_servers,
                                    "subscribe": topic}, streaming=True)

    def offsets(start: int, end: int) -> list[int]:
        batches = read_range(OffsetRange(topic, 0, start, end), options)
        return [o for batch in batches for o in batch.column("offset").to_pylist()]

    try:
        assert offsets(0, 20) == [r.offset for r in records]
        assert offsets(5, 12) == list(range(5, 12))
        assert offsets(12, 20) == list(range(12, 20))
        stats = consumer_pool().stats(topic)
    finally:
        consumer_pool().clear()  # no consumer of this process outlives the session's broker
    assert (stats["created"], stats["assign"], stats["seek"], stats["reuse"]) == (1, 1, 1, 1), stats
    assert stats["closed_error"] == 0 and stats["idle"] == 1, stats


def test_read_ranges_positions_the_next_partition_before_reading_this_one(cfg, topic_factory, produce):
    """A task's ranges: the next partition's consumer is leased (fetching) while this one is read."""
    topic = topic_factory(partitions=3)
    records = produce(topic, 90)
    options = parse_source_options({"kafka.bootstrap.servers": cfg.kafka.bootstrap_servers,
                                    "subscribe": topic, "prefetchRanges": "true"}, streaming=True)
    ranges = [OffsetRange(topic, 0, 0, 30), OffsetRange(topic, 1, 0, 10), OffsetRange(topic, 1, 10, 30),
              OffsetRange(topic, 2, 5, 30)]
    try:
        batches = read_ranges(ranges, options)
        first = next(batches)
        while_first = consumer_pool().stats(topic)
        rest = list(batches)
        after = consumer_pool().stats(topic)
        early = read_ranges([OffsetRange(topic, 0, 0, 30), OffsetRange(topic, 2, 0, 5)], options)
        next(early)
        early.close()  # the task stopped while reading its first range
        stopped = consumer_pool().stats(topic)
    finally:
        consumer_pool().clear()
    read = partition_offsets([first, *rest])
    assert read == sorted((r.partition, r.offset) for r in records if r.partition < 2 or r.offset >= 5)
    # reading partition 0, the consumer of partition 1 was already leased: two in use
    assert (while_first["created"], while_first["in_use"]) == (2, 2), while_first
    # partition 1's second range continued on its first range's consumer; one per partition
    assert (after["created"], after["reuse"], after["in_use"], after["idle"]) == (3, 1, 0, 3), after
    assert after["closed_error"] == 0, after
    # stopped early: the range being read and the one opened next are both closed, none leaks
    assert (stopped["closed_error"], stopped["in_use"]) == (2, 0), stopped


def test_without_prefetch_a_partition_is_opened_only_when_it_is_read(cfg, topic_factory, produce):
    """``prefetchRanges`` false (the default): one consumer in use at a time, the same records."""
    topic = topic_factory(partitions=2)
    records = produce(topic, 40, partitions=2)
    options = parse_source_options({"kafka.bootstrap.servers": cfg.kafka.bootstrap_servers,
                                    "subscribe": topic, "prefetchRanges": "false"}, streaming=True)
    read, while_first = read_with_pool_at_first(
        topic, read_ranges([OffsetRange(topic, 0, 0, 20), OffsetRange(topic, 1, 0, 20)], options))
    assert read == sorted((r.partition, r.offset) for r in records)
    assert (while_first["created"], while_first["in_use"]) == (1, 1), while_first


def test_a_piece_after_a_cut_is_not_opened_ahead_even_with_prefetch(cfg, topic_factory, produce):
    """``resumes``: the other task's spill is to serve that piece, so no consumer fetches it early."""
    topic = topic_factory(partitions=2)
    records = produce(topic, 40, partitions=2)
    options = parse_source_options({"kafka.bootstrap.servers": cfg.kafka.bootstrap_servers,
                                    "subscribe": topic, "prefetchRanges": "true"}, streaming=True)
    ranges = [OffsetRange(topic, 0, 0, 20), OffsetRange(topic, 1, 5, 20)]
    read, while_first = read_with_pool_at_first(topic, read_ranges(ranges, options, resumes={1}))
    assert read == sorted((r.partition, r.offset) for r in records if r.partition == 0 or r.offset >= 5)
    assert (while_first["created"], while_first["in_use"]) == (1, 1), while_first

def test_the_piece_after_a_cut_is_served_from_what_the_piece_before_it_spilled(
        cfg, topic_factory, produce, tmp_path):
    """A partition cut between two tasks is fetched once: the second piece reads the first's spill."""
    topic = topic_factory(partitions=1)
    produce(topic, 40, partitions=1)
    options = parse_source_options({"kafka.bootstrap.servers": cfg.kafka.bootstrap_servers,
                                    "subscribe": topic, "fetchSpill.dir": str(tmp_path)}, streaming=True)
    try:
        head = [o for b in read_ranges([OffsetRange(topic, 0, 0, 10)], options, spill=True)
                for o in b.column("offset").to_pylist()]
        consumer_pool().clear()  # the piece after the cut runs in another Python worker
        before = consumer_pool().stats(topic)
        tail = [o for b in read_ranges([OffsetRange(topic, 0, 10, 25)], options, spill=True)
                for o in b.column("offset").to_pylist()]
        after = consumer_pool().stats(topic)
    finally:
        consumer_pool().clear()
    assert (head, tail) == (list(range(10)), list(range(10, 25)))
    # no consumer for the second piece: the embedded broker answered the first piece's fetch with
    # all 40 records, and 10..40 went to the spill, which still holds 25..40 for the next batch
    assert after["created"] == before["created"], (before, after)
    assert [p.name.split("~")[-2:] for p in tmp_path.glob("*.arrow")] == [["10", "40.arrow"]]



def test_batch_reads_of_overlapping_ranges_in_a_warm_pool(spark, cfg, topic_factory, produce):
    topic = topic_factory()
    records = produce(topic, 45)
    whole = read_kafka(spark, cfg, topics=topic)
    assert sorted(tuple(r) for r in whole.select("partition", "offset").collect()) == [
        (r.partition, r.offset) for r in records]
    part = read_kafka(spark, cfg, topics=topic, starting={topic: {0: 3, 1: 0, 2: 14}},
                      ending={topic: {0: 9, 1: 2, 2: 15}})
    assert sorted(tuple(r) for r in part.select("partition", "offset").collect()) == [
        (0, 3), (0, 4), (0, 5), (0, 6), (0, 7), (0, 8), (1, 0), (1, 1), (2, 14)]
