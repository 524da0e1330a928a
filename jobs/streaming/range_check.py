"""A run's ``--from``/``--to`` checked against Kafka before Spark starts (one ``error:`` line).

Spark would find the same problems only after its start-up, inside the source, and report them
as a Python or Java traceback. Checked here: the bounds' order, that offsets JSON names the
source topic and every one of its partitions, offsets inside the log, and (replay) that the range
holds records at all: a range wholly before the earliest record or after the latest one says so
instead of reading nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime

from jobs.config.load import KappaConfig
from jobs.errors import ConfigError
from jobs.spark.kafka_io import Bound

Partitions = dict[int, int]


class RangeError(ConfigError):
    """A ``--from``/``--to`` range the job cannot read, or one that holds no record."""


def describe(bound: Bound | None) -> str:
    """A bound as the operator gave it."""
    if isinstance(bound, datetime):
        return bound.astimezone(UTC).isoformat()
    if isinstance(bound, Mapping):
        return json.dumps(bound)
    return str(bound or "latest")


def check_range(cfg: KappaConfig, starting: Bound, ending: Bound | None, *, replay: bool) -> None:
    """Raise :class:`RangeError` for a range that cannot be read (or, replay, holds no record)."""
    if isinstance(starting, datetime) and isinstance(ending, datetime) and starting > ending:
        raise RangeError(f"--from {describe(starting)} is after --to {describe(ending)}; swap them")
    if replay and ending == "earliest":
        raise RangeError("--to earliest: a replay must end after it starts; give latest, offsets "
                         "JSON or a timestamp")
    topic = cfg.streaming.source_topic
    reader = _reader(cfg, topic)
    partitions = sorted(p for _, p in reader.topic_partitions())
    if not partitions:
        raise RangeError(f"topic {topic} does not exist at {cfg.kafka.bootstrap_servers}; run "
                         "`kappa topics apply`")
    tps = [(topic, p) for p in partitions]
    earliest = {p: o for (_, p), o in reader.earliest(tps).items()}
    latest = {p: o for (_, p), o in reader.latest(tps).items()}
    marks = (earliest, latest)
    start = _resolve(reader, topic, starting, "--from", marks)
    if not replay:
        return
    end = _resolve(reader, topic, ending or "latest", "--to", marks)
    for partition in partitions:
        if start[partition] > end[partition]:
            raise RangeError(f"--from {describe(starting)} is at offset {start[partition]} of "
                             f"{topic}-{partition}, after --to {describe(ending)} at offset "
                             f"{end[partition]}; the start must not be after the end")
    if all(start[p] >= end[p] for p in partitions):
        raise RangeError(_empty(cfg, topic, starting=starting, ending=ending, start=start, end=end,
                                marks=marks))


def _reader(cfg: KappaConfig, topic: str):
    from jobs.kafka.client import OffsetReader
    from jobs.kafka.options import parse_source_options

    props = {f"kafka.{key}": str(value) for key, value in cfg.kafka.client_config().items()}
    return OffsetReader(parse_source_options({"subscribe": topic, **props}, streaming=True))


def _resolve(reader, topic: str, bound: Bound, flag: str,
             marks: tuple[Partitions, Partitions]) -> Partitions:
    """Each partition's offset for ``bound`` (a timestamp after a partition's last record: its end)."""
    from jobs.kafka.specs import TIMESTAMP, OffsetSpec

    earliest, latest = marks
    if bound == "earliest":
        return dict(earliest)
    if bound == "latest":
        return dict(latest)
    if isinstance(bound, datetime):
        spec = OffsetSpec(TIMESTAMP, timestamp=int(bound.timestamp() * 1000), no_match="latest")
        found = reader.resolve(spec, [(topic, p) for p in sorted(latest)], starting=True)
        return {p: o for (_, p), o in found.items()}
    if not isinstance(bound, Mapping):
        raise RangeError(f"{flag} {bound!r}: expected earliest, latest, offsets JSON or a timestamp")
    return _offsets(topic, bound, flag, marks)


def _offsets(topic: str, bound: Mapping, flag: str, marks: tuple[Partitions, Partitions]) -> Partitions:
    earliest, latest = marks
    example = json.dumps({topic: {str(p): -2 for p in sorted(latest)}})
    if set(bound) != {topic} or not isinstance(bound[topic], Mapping):
        raise RangeError(f"{flag} {json.dumps(bound)} must name the source topic {topic} only, "
                         f"like {example}")
    try:
        given = {int(p): int(o) for p, o in bound[topic].items()}
    except (TypeError, ValueError):
        raise RangeError(f"{flag} {json.dumps(bound)}: partitions and offsets must be integers, "
                         f"like {example}") from None
    if set(given) != set(latest):
        missing = ", ".join(str(p) for p in sorted(set(latest) - set(given))) or "none"
        unknown = ", ".join(str(p) for p in sorted(set(given) - set(latest))) or "none"
        raise RangeError(f"{flag} {json.dumps(bound)} must list every partition of {topic} (missing "
                         f"{missing}, unknown {unknown}); use -2 for earliest and -1 for latest, "
                         f"like {example}")
    out = {}
    for partition, offset in sorted(given.items()):
        value = {-2: earliest[partition], -1: latest[partition]}.get(offset, offset)
        if value < -2 or value > latest[partition]:
            raise RangeError(f"{flag} offset {offset} of {topic}-{partition} is outside its log "
                             f"(offsets {earliest[partition]}..{latest[partition]}; -2 = earliest, "
                             "-1 = latest)")
        out[partition] = max(value, earliest[partition]) if offset >= 0 else value
    return out


def _empty(cfg: KappaConfig, topic: str, *, starting: Bound, ending: Bound | None, start: Partitions,
           end: Partitions, marks: tuple[Partitions, Partitions]) -> str:
    """Why a replay range holds no record, with the log's first or last record time."""
    from jobs.streaming.preflight import record_timestamp

    earliest, latest = marks
    span = f"--from {describe(starting)} --to {describe(ending)}"
    filled = [p for p in latest if latest[p] > earliest[p]]
    if not filled:
        return f"topic {topic} holds no records: nothing to replay ({span})"
    if all(end[p] <= earliest[p] for p in filled):
        first = min(filter(None, (record_timestamp(cfg, topic, p, earliest[p]) for p in filled)),
                    default=None)
        return (f"the range {span} ends before the earliest record of {topic} ({_iso(first)}): "
                "nothing to replay; start later, or from earliest")
    if all(start[p] >= latest[p] for p in filled):
        last = max(filter(None, (record_timestamp(cfg, topic, p, latest[p] - 1) for p in filled)),
                   default=None)
        return (f"the range {span} starts after the latest record of {topic} ({_iso(last)}): "
                "nothing to replay; start earlier, or run live to wait for new records")
    return f"the range {span} holds no records of {topic}: nothing to replay"


def _iso(ms: int | None) -> str:
    if ms is None:
        return "time unknown"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
