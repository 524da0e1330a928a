"""Helpers of the loader tests: records produced by hand with confluent-kafka."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from jobs.config.load import KappaConfig

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DAY_MS = 86_400_000


@dataclass
class Lake:
    """A config whose loader tables read this test's topics into this test's lake."""

    cfg: KappaConfig
    env: dict[str, str]
    topics: dict[str, str]


def produce(props: dict[str, str], topic: str, records: list[tuple[bytes | None, bytes, int]],
            headers: list[tuple[str, bytes]] | None = None) -> None:
    """Produce (key, value, partition) records and wait for every acknowledgement."""
    from confluent_kafka import Producer

    producer = Producer({**props, "enable.idempotence": True, "linger.ms": 20})
    for index, (key, value, partition) in enumerate(records):
        producer.produce(topic, value=value, key=key, partition=partition, headers=headers)
        if index % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def raw_record(rsvp_id: int, mtime: int) -> bytes:
    """A minimal rsvps.raw value (the loader's bronze only extracts rsvp_id and mtime)."""
    return json.dumps({"rsvp_id": rsvp_id, "mtime": mtime, "response": "yes"}).encode()


def produce_raw(props: dict[str, str], topic: str, count: int, partitions: int = 3,
                first_id: int = 1, base_ms: int = BASE_MS) -> None:
    """``count`` raw records, rsvp ids first_id.., round-robin over partitions, 1 s apart."""
    produce(props, topic, [(str(first_id + i).encode(), raw_record(first_id + i, base_ms + i * 1000),
                            i % partitions) for i in range(count)])


def analyzed(rsvp_id: int, event_ms: int, *, city: str = "Barcelona", response: str = "yes",
             guests: int = 0, offset: int = 0, topics: tuple[str, ...] = ("Salsa",),
             lat: float = 41.36, lon: float = 2.15) -> bytes:
    """One rsvps.analyzed value in the documented format (docs/streaming.md, schema_version 1)."""
    stamp = dt.datetime.fromtimestamp(event_ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return json.dumps({
        "schema_version": 1, "rsvp_id": rsvp_id, "event_time_ms": event_ms, "event_time": stamp,
        "event_id": f"ev{rsvp_id % 2}", "event_name": "Stand-up Comedy Mixer", "group_id": 123,
        "group_name": "Comedy BCN", "member_id": 1000 + rsvp_id, "response": response, "guests": guests,
        "topics": list(topics), "city": city, "country": "ES", "state": None, "lat": lat, "lon": lon,
        "venue_id": 24231817, "source_topic": "rsvps.raw", "source_partition": 0, "source_offset": offset,
        "kafka_timestamp_ms": event_ms + 120, "ingest_lag_ms": 120, "late": False}).encode()


def summary(kind: str, key: str, emitted_ms: int, batch_id: int, **fields: object) -> bytes:
    """One rsvps.summaries value in the documented format."""
    return json.dumps({"schema_version": 1, "kind": kind, "key": key, "query": "rsvps-live",
                       "batch_id": batch_id, "emitted_ms": emitted_ms, **fields}).encode()
