"""Fixtures of the Kafka source/sink tests: known records produced with confluent-kafka directly.

Expected values come from the producer's delivery reports (partition, offset and timestamp as
the broker acknowledged them), never from the code under test.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from jobs.config.load import KappaConfig
from tests.integration.kafka.records import Produced


@pytest.fixture()
def cfg(stack: KappaConfig) -> KappaConfig:
    """The session's config (embedded broker on a free port)."""
    return stack


@pytest.fixture()
def admin(kafka_props: dict[str, str]) -> AdminClient:
    return AdminClient(kafka_props)


@pytest.fixture()
def produce(kafka_props: dict[str, str]) -> Callable[..., list[Produced]]:
    """produce(topic, count, start=0, partitions=3, ts=None, headers=False) -> acknowledged records.

    Record i goes to partition i % partitions with key b"k<i>" and value b"<prefix><i>"; ``ts`` maps
    i to a CreateTime in ms.
    """

    def run(topic: str, count: int, *, start: int = 0, partitions: int = 3,
            ts: Callable[[int], int] | None = None, headers: bool = False,
            prefix: str = "r") -> list[Produced]:
        producer = Producer({**kafka_props, "linger.ms": 5, "enable.idempotence": True})
        acked: list[Produced] = []
        errors: list[object] = []

        def on_delivery(sent_headers, err, msg) -> None:
            if err is not None:
                errors.append(err)
                return
            acked.append(Produced(msg.partition(), msg.offset(), msg.key(), msg.value(),
                                  msg.timestamp()[1], sent_headers))

        for i in range(start, start + count):
            extra = {"timestamp": ts(i)} if ts else {}
            sent = (("n", str(i).encode()), ("empty", None)) if headers else None
            if sent:
                extra["headers"] = list(sent)
            producer.produce(topic, key=f"k{i}".encode(), value=f"{prefix}{i}".encode(),
                             partition=i % partitions, on_delivery=partial(on_delivery, sent),
                             **extra)
        assert producer.flush(30) == 0
        assert not errors, errors
        return sorted(acked)

    return run


@pytest.fixture()
def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture()
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")


@dataclass
class StreamRun:
    """What one availableNow run of a query produced."""

    rows: list[tuple]
    progress: list[dict]
    query: object


@pytest.fixture()
def run_available_now() -> Iterator[Callable[..., StreamRun]]:
    """Run a streaming DataFrame with Trigger.AvailableNow, collecting rows with foreachBatch."""
    started = []

    def run(df, checkpoint: str, columns=("partition", "offset", "key", "value")) -> StreamRun:
        collected: list[tuple] = []

        def collect(batch, _batch_id: int) -> None:
            collected.extend(tuple(bytes(v) if isinstance(v, bytearray) else v for v in row)
                             for row in batch.select(*columns).collect())

        query = (df.writeStream.foreachBatch(collect).trigger(availableNow=True)
                 .option("checkpointLocation", checkpoint).start())
        started.append(query)
        assert query.awaitTermination(120), "the availableNow run did not finish in 120 s"
        return StreamRun(sorted(collected), list(query.recentProgress), query)

    yield run
    for query in started:
        query.stop()
