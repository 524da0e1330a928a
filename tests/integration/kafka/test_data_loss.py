"""Records deleted below the checkpoint: failOnDataLoss=true fails, false skips and counts."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from pyspark.errors import PySparkException, StreamingQueryException

from jobs.errors import KafkaSourceError
from jobs.kafka.consumer import read_range
from jobs.kafka.dataloss import DataLoss, read_ledger, skipped_records
from jobs.kafka.offsets import OffsetRange
from jobs.kafka.options import parse_source_options
from jobs.spark.kafka_io import read_kafka
from tests.integration.kafka.records import expected


def delete_below(admin, topic: str, partition: int, offset: int) -> None:
    futures = admin.delete_records([TopicPartition(topic, partition, offset)])
    for future in futures.values():
        future.result(15)


def test_stream_fails_then_skips_and_counts_records_deleted_below_the_checkpoint(
        spark, cfg, admin, topic_factory, produce, checkpoint, run_available_now, tmp_path):
    topic = topic_factory()
    ledger = tmp_path / "ledger"

    def stream(fail: str):
        return read_kafka(spark, cfg, topics=topic, stream=True,
                          options={"failOnDataLoss": fail, "dataLossLogDir": str(ledger)})

    first = produce(topic, 30)
    assert run_available_now(stream("true"), checkpoint).rows == expected(first)
    second = produce(topic, 30, start=30)
    delete_below(admin, topic, 0, 14)

    with pytest.raises(StreamingQueryException) as info:
        run_available_now(stream("true"), checkpoint)
    assert (f"data loss in {topic}-0: requested offset 10 but the earliest available offset "
            "is 14") in str(info.value)
    assert "failOnDataLoss=false" in str(info.value)
    assert skipped_records(ledger) == 0

    run = run_available_now(stream("false"), checkpoint)
    kept = [r for r in second if not (r.partition == 0 and r.offset < 14)]
    assert len(kept) == 26
    assert run.rows == expected(kept)
    assert read_ledger(ledger) == [DataLoss("deleted", topic, 0, requested=10, earliest=14,
                                            skipped=4)]
    assert skipped_records(ledger) == 4


def test_batch_read_below_the_log_start(spark, cfg, admin, topic_factory, produce, tmp_path):
    topic = topic_factory()
    records = produce(topic, 30)
    delete_below(admin, topic, 2, 7)
    starting = {topic: {0: 0, 1: 0, 2: 0}}
    with pytest.raises(PySparkException) as info:
        read_kafka(spark, cfg, topics=topic, starting=starting).collect()
    assert f"data loss in {topic}-2: requested offset 0 but the earliest available offset is 7" \
        in str(info.value)
    ledger = tmp_path / "ledger"
    df = read_kafka(spark, cfg, topics=topic, starting=starting,
                    options={"failOnDataLoss": "false", "dataLossLogDir": str(ledger)})
    rows = sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in df.collect())
    assert rows == expected([r for r in records if not (r.partition == 2 and r.offset < 7)])
    assert skipped_records(ledger) == 7


def test_executor_detects_records_deleted_after_planning(cfg, admin, topic_factory, produce,
                                                        tmp_path):
    topic = topic_factory(partitions=1)
    records = produce(topic, 10, partitions=1)
    planned = OffsetRange(topic, 0, 0, 10)
    delete_below(admin, topic, 0, 4)
    base = {"kafka.bootstrap.servers": cfg.kafka.bootstrap_servers, "subscribe": topic}

    strict = parse_source_options(base, streaming=True)
    with pytest.raises(KafkaSourceError, match=f"{topic}-0: requested offset 0 but the earliest "
                                               "available offset is 4"):
        list(read_range(planned, strict))

    ledger = tmp_path / "ledger"
    lenient = parse_source_options({**base, "failOnDataLoss": "false",
                                    "dataLossLogDir": str(ledger)}, streaming=True)
    batches = list(read_range(planned, lenient))
    offsets = [o for batch in batches for o in batch.column("offset").to_pylist()]
    assert offsets == [r.offset for r in records if r.offset >= 4]
    assert skipped_records(ledger) == 4
