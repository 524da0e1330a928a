"""Airflow owns time, Kafka owns offsets: a data interval becomes a per-partition offset range.

``resolve_interval`` maps ``[start, end)`` to offsets with Kafka's timestamp lookup (the first
offset whose record timestamp is at or after each bound), and ``check_retained`` fails closed
when part of a range is no longer in the log. Both replay DAGs use them before any write.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from jobs.config.load import KappaConfig
from jobs.errors import KappaError
from jobs.host.locks import LockHeld, exclusive_lock

logger = logging.getLogger(__name__)


class RangeNotRetained(KappaError):
    """Part of the requested range has been deleted from Kafka (retention): nothing is replayed."""


class TopicMissing(KappaError):
    """The topic of a replay does not exist: no retry can find it, the operator creates it."""


class ReplayConflict(KappaError):
    """Another replay is running; replays of the same sinks never run at the same time."""


@dataclass(frozen=True)
class OffsetRange:
    """A bounded read of one topic: ``[start, end)`` per partition."""

    topic: str
    start: dict[int, int]
    end: dict[int, int]

    @property
    def records(self) -> int:
        """Offsets covered (records, on a topic without transaction markers or gaps)."""
        return sum(max(self.end[p] - self.start.get(p, 0), 0) for p in self.end)

    def starting(self) -> dict[str, dict[str, int]]:
        """``startingOffsets`` JSON shape."""
        return {self.topic: {str(p): o for p, o in sorted(self.start.items())}}

    def ending(self) -> dict[str, dict[str, int]]:
        """``endingOffsets`` JSON shape (exclusive)."""
        return {self.topic: {str(p): o for p, o in sorted(self.end.items())}}

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (partition keys as strings)."""
        data = asdict(self)
        data.update(start=self.starting()[self.topic], end=self.ending()[self.topic], records=self.records)
        return data


def parse_offsets(topic: str, text: str | dict) -> dict[int, int]:
    """``{"0": 10, "1": 12}`` or ``{"<topic>": {"0": 10}}`` (JSON text or a dict) -> {partition: offset}."""
    data = json.loads(text) if isinstance(text, str) else dict(text)
    if topic in data and isinstance(data[topic], dict):
        data = data[topic]
    try:
        return {int(p): int(o) for p, o in data.items()}
    except (TypeError, ValueError, AttributeError) as exc:
        raise KappaError(f'offsets {text!r}: expected {{"<partition>": <offset>}} for {topic}; '
                         f"{exc}") from exc


def _reader(cfg: KappaConfig, topic: str):
    from jobs.kafka.client import OffsetReader
    from jobs.kafka.options import parse_source_options

    props = {f"kafka.{key}": str(value) for key, value in cfg.kafka.client_config().items()}
    return OffsetReader(parse_source_options({"subscribe": topic, **props}, streaming=False))


def _partitions(cfg: KappaConfig, topic: str, reader=None) -> list[tuple[str, int]]:
    tps = (reader or _reader(cfg, topic)).topic_partitions()
    if not tps:
        raise TopicMissing(f"topic {topic} does not exist; run `kappa topics apply` (or create it), "
                           f"then clear the task (broker {cfg.kafka.bootstrap_servers})")
    return tps


def require_topic(cfg: KappaConfig, topic: str) -> None:
    """Fail with :class:`TopicMissing` when ``topic`` does not exist."""
    _partitions(cfg, topic)


def resolve_interval(cfg: KappaConfig, topic: str, start: datetime, end: datetime) -> OffsetRange:
    """Offsets of ``[start, end)`` by record timestamp, per partition of ``topic``."""
    from jobs.kafka.specs import TIMESTAMP, OffsetSpec

    reader = _reader(cfg, topic)
    tps = _partitions(cfg, topic, reader)

    def at(moment: datetime) -> dict[int, int]:
        spec = OffsetSpec(TIMESTAMP, timestamp=int(moment.timestamp() * 1000), no_match="latest")
        return {p: o for (_, p), o in reader.resolve(spec, tps, starting=True).items()}

    return OffsetRange(topic, at(start), at(end))


def check_retained(cfg: KappaConfig, rng: OffsetRange, start: datetime | None = None) -> None:
    """Fail closed when part of the range is no longer in the log.

    By offset: a partition's log starts after the range's first offset (DeleteRecords, retention).
    By time (``start`` given): the oldest retained record is younger than ``start`` (or none is
    retained) and either the log no longer starts at offset 0 or ``start`` is older than the
    topic's ``retention.ms``:
    records of the range may have existed and been deleted, so an empty read would be a silent
    gap. A log that starts at 0 within retention has lost nothing, whatever its first record's time.
    """
    from jobs.streaming.preflight import record_timestamp

    reader = _reader(cfg, rng.topic)
    partitions = [(rng.topic, p) for p in rng.end]
    earliest = {p: o for (_, p), o in reader.earliest(partitions).items()}
    latest = {p: o for (_, p), o in reader.latest(partitions).items()}
    horizon_ms = _retention_horizon_ms(cfg, rng.topic) if start is not None else None
    for partition, first in sorted(earliest.items()):
        wanted = rng.start.get(partition, 0)
        first_ms = (record_timestamp(cfg, rng.topic, partition, first)
                    if start is not None and first < latest[partition] else None)
        beyond_retention = horizon_ms is not None and start is not None and (
            start.timestamp() * 1000 < horizon_ms)
        younger = start is not None and (first_ms is None or first_ms > start.timestamp() * 1000)
        # an empty partition whose log moved on tells no time: only the retention horizon judges it
        lost_by_time = younger and (beyond_retention or (first > 0 and first_ms is not None))
        if first > wanted or lost_by_time:
            when = datetime.fromtimestamp(first_ms / 1000, UTC).isoformat() if first_ms else "none retained"
            why = (f"; the range starts before the topic's retention horizon "
                   f"{datetime.fromtimestamp(horizon_ms / 1000, UTC).isoformat(timespec='seconds')} "
                   "(now - retention.ms)" if beyond_retention and horizon_ms is not None else "")
            raise RangeNotRetained(
                f"{rng.topic}-{partition}: the range starts at offset {wanted}"
                f"{f' ({start.isoformat()})' if start else ''} but the earliest retained offset is "
                f"{first} (record time {when}){why}; the data before it was deleted by retention. "
                "Replay from the earliest retained offset with the `backfill` DAG, or restore from "
                "the lake (docs/runbooks/airflow.md#range-no-longer-retained)")


def _retention_horizon_ms(cfg: KappaConfig, topic: str) -> int | None:
    """``now - retention.ms`` of the topic in ms (None: kept forever, or the config is unreadable)."""
    from jobs.kafka.topics import admin_client, describe_topic_configs

    try:
        retention = int(describe_topic_configs(admin_client(cfg.kafka), topic).get("retention.ms", "-1"))
    except (KappaError, ValueError) as exc:
        logger.warning("retention.ms of %s unreadable (%s): checking retention by offsets only", topic, exc)
        return None
    if retention < 0:
        return None
    return int(datetime.now(UTC).timestamp() * 1000) - retention


@contextmanager
def replay_guard(cfg: KappaConfig, rng: OffsetRange, *, hold: bool = True) -> Iterator[None]:
    """Pre-flight: no other replay of the same source topic runs; with ``hold``, keep it so.

    Replays of one topic run one at a time, overlapping or not: the Redis fence applies each
    partition's offsets in order, so a later range applied first would make an earlier one a
    no-op. The guard is an flock beside the queries' own locks (released by the kernel if the
    holder dies) whose file names the holder's pid, range and start time. It guards one
    machine: on a multi-host Airflow give the replay tasks a one-slot pool as well
    (docs/runbooks/backfill.md).
    """
    from jobs.streaming.state import checkpoint_path, lock_file

    path = lock_file(checkpoint_path(cfg.lake.checkpoint_root, "kappa-replays") / rng.topic)
    stamp = json.dumps({"pid": os.getpid(), "start": rng.starting()[rng.topic],
                        "end": rng.ending()[rng.topic],
                        "since": datetime.now(UTC).isoformat(timespec="seconds")})
    try:
        fd = exclusive_lock(path, stamp if hold else None)
    except LockHeld as held:
        raise ReplayConflict(
            f"pre-flight: another replay of {rng.topic} is running ({held.holder or '{}'}); replays "
            "of one topic run one at a time. Wait for it to finish (Airflow retries this task), or "
            f"stop it; the lock is {path}") from None
    try:
        yield
    finally:
        os.close(fd)
