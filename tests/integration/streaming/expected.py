"""An independent, plain-Python computation of what the streaming job must produce.

Written from docs/streaming.md, not from the job's code: it knows which input lines are valid
from the generator's own labels, and decides lateness by the stream-time rule: per partition, in
offset order, a valid record is late when its event time is more than the grace below the largest
event time of the valid records before it. How the job cut the log into batches does not enter.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition

CITY_MS, SLIDE_MS, TRENDING_MS, MEMBERS_MS = 60_000, 60_000, 600_000, 60_000


@dataclass
class Sent:
    """One produced input line: where it landed and what the generator says it is."""

    partition: int
    offset: int
    line: bytes
    kind: str


@dataclass
class Expected:
    """Every summary the job must hold in Redis, computed by hand."""

    totals: Counter = field(default_factory=Counter)
    topics: Counter = field(default_factory=Counter)
    cities: dict[int, Counter] = field(default_factory=lambda: defaultdict(Counter))
    trending: dict[int, Counter] = field(default_factory=lambda: defaultdict(Counter))
    members: dict[int, set] = field(default_factory=lambda: defaultdict(set))
    events: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    valid_positions: set[tuple[int, int]] = field(default_factory=set)
    invalid: dict[tuple[int, int], str] = field(default_factory=dict)


def city_name(city: str) -> str:
    return " ".join(word[:1].upper() + word[1:].lower() for word in city.split())


def compute(sent: Iterable[Sent], watermark_s: int = 60) -> Expected:
    """Fold the input partition by partition in offset order (the stream-time rule)."""
    out = Expected()
    for _, items in sorted(_by_partition(sent).items()):
        stream_ms: int | None = None
        for item in sorted(items, key=lambda s: s.offset):
            late_below = None if stream_ms is None else stream_ms - watermark_s * 1000
            mtime = _fold(out, item, late_below)
            if mtime is not None:
                stream_ms = mtime if stream_ms is None else max(stream_ms, mtime)
    return out


def _by_partition(sent: Iterable[Sent]) -> dict[int, list[Sent]]:
    parts: dict[int, list[Sent]] = defaultdict(list)
    for item in sent:
        parts[item.partition].append(item)
    return parts


def _fold(out: Expected, item: Sent, watermark: int | None) -> int | None:
    out.totals["input"] += 1
    if item.kind.startswith("malformed:"):
        out.totals["dlq"] += 1
        out.invalid[(item.partition, item.offset)] = item.kind.split(":", 1)[1]
        return None
    record = json.loads(item.line)
    out.totals["valid"] += 1
    out.valid_positions.add((item.partition, item.offset))
    mtime = record["mtime"]
    late = watermark is not None and mtime < watermark
    topics = list(dict.fromkeys(t["topic_name"] for t in record["group"]["group_topics"]))
    out.topics.update(topics)
    event = out.events[record["event"]["event_id"]]
    if record["response"] == "yes":
        event["yes"] += 1
        event["guests"] += record["guests"]
    else:
        event["no"] += 1
    if late:
        out.totals["late"] += 1
        return mtime
    out.cities[mtime // CITY_MS * CITY_MS][city_name(record["group"]["group_city"])] += 1
    out.members[mtime // MEMBERS_MS * MEMBERS_MS].add(record["member"]["member_id"])
    bucket = mtime // SLIDE_MS * SLIDE_MS
    for k in range(TRENDING_MS // SLIDE_MS):
        out.trending[bucket - k * SLIDE_MS].update(topics)
    return mtime


def read_topic(props: Mapping[str, str], topic: str, partitions: int) -> list[Any]:
    """Every record of a topic up to its high watermark (not fewer, not more)."""
    consumer = Consumer({**props, "group.id": "verify", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    records: list[Any] = []
    try:
        for partition in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, low)])
            got, deadline = 0, time.monotonic() + 120
            while got < high - low:
                assert time.monotonic() < deadline, f"{topic}-{partition}: read {got} of {high - low}"
                for message in consumer.consume(10_000, timeout=2):
                    if message.error() is None and message.offset() < high:
                        records.append(message)
                        got += 1
            consumer.unassign()
    finally:
        consumer.close()
    return records


def metrics_batches(props: Mapping[str, str], topic: str, query: str) -> list[dict[str, Any]]:
    """The job's batch metrics, the last report per batch id (a replayed batch reports again)."""
    latest: dict[int, dict[str, Any]] = {}
    for message in read_topic(props, topic, 1):
        data = json.loads(message.value())
        if data.get("query") == query and data.get("kind") == "streaming_batch":
            latest[data["batch_id"]] = data
    return [latest[b] for b in sorted(latest)]
