"""Where a load starts (offsets recorded in the Delta table) and where it ends (``--until``)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from deltalake import DeltaTable

from jobs.config.load import KappaConfig
from jobs.errors import ConfigError
from jobs.kafka.client import OffsetReader
from jobs.kafka.options import parse_source_options
from jobs.lake.delta import app_version
from jobs.loader.tables import TableSpec

LATEST = "latest"
SAMPLE_RECORDS = 200  # per partition, to estimate a batch's bytes
SAMPLE_TIMEOUT_S = 10.0
SAMPLE_FETCH_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Until:
    """The end bound of a run: latest, explicit offsets, or a timestamp (ms)."""

    kind: str
    offsets: dict[str, dict[int, int]] | None = None
    timestamp_ms: int | None = None

    def describe(self) -> str:
        """A short text for logs and the audit table."""
        if self.kind == "offsets":
            return json.dumps(self.offsets, sort_keys=True)
        return LATEST if self.kind == LATEST else f"timestamp {self.timestamp_ms}"


@dataclass(frozen=True)
class PartitionRange:
    """One topic-partition's range of a run: ``[start, end)``."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def records(self) -> int:
        """Offsets covered (records, on a topic without gaps)."""
        return max(self.end - self.start, 0)


def parse_until(text: str | None) -> Until:
    """``latest``, ``{"topic": {"0": 42}}`` or a timestamp (ISO 8601 with zone, or ms)."""
    value = (text or LATEST).strip()
    if value.lower() == LATEST:
        return Until(LATEST)
    if value.startswith("{"):
        try:
            data = json.loads(value)
            offsets = {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in data.items()}
        except (ValueError, AttributeError, TypeError) as exc:
            raise ConfigError(f'--until {value!r} is not offsets JSON like {{"events.raw": {{"0": 100}}}}: '
                              f"{exc}") from exc
        return Until("offsets", offsets=offsets)
    if value.isdigit():
        return Until("timestamp", timestamp_ms=int(value))
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ConfigError(f"--until {value!r}: expected latest, offsets JSON, ms since epoch or an "
                          "ISO timestamp with zone (2026-01-01T00:00:00Z)") from exc
    if moment.tzinfo is None:
        raise ConfigError(f"--until {value!r} has no time zone; add Z or +00:00")
    return Until("timestamp", timestamp_ms=int(moment.timestamp() * 1000))


def offset_reader(cfg: KappaConfig, topic: str) -> OffsetReader:
    """Driver-side offset queries for one topic, with the config's connection settings."""
    props: dict[str, Any] = {f"kafka.{k}": str(v) for k, v in cfg.kafka.client_config().items()}
    return OffsetReader(parse_source_options({"subscribe": topic, **props}, streaming=False))


def plan(cfg: KappaConfig, spec: TableSpec, topic: str, snapshot: DeltaTable | None, *,
         until: Until, max_records: int | None = None) -> list[PartitionRange]:
    """Per partition: start = the offset recorded in the table (or earliest), end = the bound."""
    reader = offset_reader(cfg, topic)
    tps = reader.topic_partitions()
    earliest, latest = reader.earliest(tps), reader.latest(tps)
    bound = _bound(reader, until, tps, latest)
    ranges = []
    for tp in tps:
        recorded = app_version(snapshot, spec.app_id(*tp))
        start = earliest[tp] if recorded is None else recorded
        end = min(bound.get(tp, start), latest[tp])
        ranges.append(PartitionRange(tp[0], tp[1], start, max(start, end)))
    return ranges if max_records is None else cap_ranges(ranges, max_records)


def cap_ranges(ranges: list[PartitionRange], max_records: int) -> list[PartitionRange]:
    """At most ``max_records`` offsets, the cap spread evenly over the partitions."""
    if not ranges:
        return ranges
    per_partition = -(-max_records // len(ranges))
    return [PartitionRange(r.topic, r.partition, r.start, min(r.end, r.start + per_partition))
            for r in ranges]


def _bound(reader: OffsetReader, until: Until, tps: list[tuple[str, int]],
           latest: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    if until.kind == LATEST:
        return latest
    if until.kind == "offsets":
        given = until.offsets or {}
        return {tp: given[tp[0]][tp[1]] for tp in tps if tp[1] in given.get(tp[0], {})}
    from jobs.kafka.specs import TIMESTAMP, OffsetSpec

    spec = OffsetSpec(TIMESTAMP, timestamp=until.timestamp_ms, option="--until")
    return reader.resolve(spec, tps, starting=False)


def latest_offsets(cfg: KappaConfig, topic: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(earliest, latest) per partition of ``topic``."""
    reader = offset_reader(cfg, topic)
    tps = reader.topic_partitions()
    earliest, latest = reader.earliest(tps), reader.latest(tps)
    return {tp: (earliest[tp], latest[tp]) for tp in tps}


def sample_record_bytes(cfg: KappaConfig, ranges: list[PartitionRange],
                        per_partition: int = SAMPLE_RECORDS) -> float | None:
    """Mean Kafka size (key + value + headers) of the first records of each range.

    Reads at most ``per_partition`` records of each partition (small fetches), for at most
    ``SAMPLE_TIMEOUT_S``; None when no record could be read.
    """
    from confluent_kafka import Consumer, TopicPartition

    wanted = {(r.topic, r.partition): min(r.records, per_partition) for r in ranges if r.records}
    if not wanted:
        return None
    props = {**cfg.kafka.client_config(), "group.id": "kappa-loader-sizing", "enable.auto.commit": False,
             "fetch.max.bytes": SAMPLE_FETCH_BYTES, "max.partition.fetch.bytes": SAMPLE_FETCH_BYTES}
    consumer = Consumer(props)
    seen = dict.fromkeys(wanted, 0)
    total = 0
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges if r.records])
        deadline = time.monotonic() + SAMPLE_TIMEOUT_S
        while time.monotonic() < deadline and any(seen[tp] < count for tp, count in wanted.items()):
            for message in consumer.consume(500, timeout=1.0):
                tp = (message.topic(), message.partition())
                if message.error() or tp not in seen or seen[tp] >= wanted[tp]:
                    continue
                seen[tp] += 1
                total += _record_bytes(message)
    finally:
        consumer.close()
    count = sum(seen.values())
    return total / count if count else None


def _record_bytes(message: Any) -> int:
    """Bytes of a consumed message: key, value, header names and values."""
    headers = message.headers() or []
    return (len(message.key() or b"") + len(message.value() or b"")
            + sum(len(name) + len(value or b"") for name, value in headers))
