"""Where a read starts and ends: parsing ``startingOffsets``, ``endingTimestamp`` and friends.

The JSON shapes are those of Spark's Kafka connector (JsonUtils.scala): offsets
``{"topic":{"0":23,"1":-2}}`` (-2 = earliest, -1 = latest), timestamps ``{"topic":{"0":1700000000000}}``
(milliseconds since the epoch) and assignments ``{"topic":[0,1]}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from jobs.errors import KafkaSourceError

EARLIEST = "earliest"
LATEST = "latest"
OFFSETS = "offsets"
TIMESTAMP = "timestamp"
TIMESTAMPS = "timestamps"
EARLIEST_OFFSET = -2
LATEST_OFFSET = -1
NO_MATCH_STRATEGIES = ("error", "latest")

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class OffsetSpec:
    """One end of a read: earliest, latest, offsets per partition, or timestamp(s)."""

    kind: str
    values: Mapping[TopicPartitionKey, int] = field(default_factory=dict)
    timestamp: int | None = None
    no_match: str = "error"
    option: str = ""


def parse_offset_spec(opts: Mapping[str, str], side: str, default: str | None) -> OffsetSpec | None:
    """Parse the ``<side>Timestamp``, ``<side>OffsetsByTimestamp`` or ``<side>Offsets`` option.

    Args:
        opts: lower-cased options.
        side: ``"starting"`` or ``"ending"``.
        default: ``earliest``/``latest`` when none of the three is set, or None for no bound.
    """
    names = {f"{side}timestamp": f"{side}Timestamp",
             f"{side}offsetsbytimestamp": f"{side}OffsetsByTimestamp",
             f"{side}offsets": f"{side}Offsets"}
    given = [key for key in names if key in opts]
    if len(given) > 1:
        listed = " and ".join(f"'{names[key]}'" for key in given)
        raise KafkaSourceError(f"options {listed} are both set; keep exactly one of them")
    no_match = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if no_match not in NO_MATCH_STRATEGIES:
        raise KafkaSourceError(f"option 'startingOffsetsByTimestampStrategy' is {no_match!r}: "
                               "expected 'error' or 'latest'")
    if not given:
        return OffsetSpec(default, option=f"{side}Offsets") if default else None
    key = given[0]
    name, text = names[key], opts[key].strip()
    if key.endswith("timestamp") and not key.endswith("bytimestamp"):
        return OffsetSpec(TIMESTAMP, timestamp=_timestamp(text, name), no_match=no_match,
                          option=name)
    if key.endswith("bytimestamp"):
        values = _partition_json(text, name, minimum=0, what="timestamp in ms")
        return OffsetSpec(TIMESTAMPS, values=values, no_match=no_match, option=name)
    if text.lower() in (EARLIEST, LATEST):
        return OffsetSpec(text.lower(), option=name)
    values = _partition_json(text, name, minimum=EARLIEST_OFFSET, what="offset")
    return OffsetSpec(OFFSETS, values=values, option=name)


def validate_spec_pair(start: OffsetSpec | None, end: OffsetSpec | None, *, streaming: bool) -> None:
    """Reject start/end combinations the read cannot honour (KafkaSourceProvider rules)."""
    if start is not None and not streaming:
        _reject(start, LATEST, LATEST_OFFSET, "can't be latest for batch queries on Kafka; "
                "use 'earliest', offsets or a timestamp")
    if end is None:
        return
    _reject(end, EARLIEST, EARLIEST_OFFSET, "can't be earliest: a read must end after it starts; "
            "use 'latest', offsets or a timestamp")
    if start is None or start.kind != end.kind:
        return
    if start.kind == TIMESTAMP and start.timestamp is not None and end.timestamp is not None:
        if start.timestamp > end.timestamp:
            raise KafkaSourceError(f"option '{start.option}' ({start.timestamp}) is after "
                                   f"'{end.option}' ({end.timestamp}); swap or fix them")
    if start.kind in (OFFSETS, TIMESTAMPS):
        if set(start.values) != set(end.values):
            raise KafkaSourceError(
                f"options '{start.option}' and '{end.option}' name different topic-partitions "
                f"({_names(start.values)} vs {_names(end.values)}); list the same partitions")
        for tp, first in start.values.items():
            last = end.values[tp]
            if first > last >= 0 and first >= 0:
                raise KafkaSourceError(
                    f"option '{start.option}' for {tp[0]}-{tp[1]} is {first}, after "
                    f"'{end.option}' {last}; the start must not be greater than the end")


def parse_assign(text: str) -> tuple[TopicPartitionKey, ...]:
    """Parse the ``assign`` option ``{"topic":[0,1]}`` into (topic, partition) pairs."""
    data = _json(text, "assign", '{"topicA":[0,1],"topicB":[2]}')
    pairs: list[TopicPartitionKey] = []
    for topic, partitions in data.items():
        if not isinstance(partitions, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions):
            raise KafkaSourceError(f"option 'assign' is {text!r}: topic {topic!r} must map to a "
                                   'list of partition numbers, like {"topicA":[0,1]}')
        pairs.extend((topic, p) for p in partitions)
    if not pairs:
        raise KafkaSourceError(f"option 'assign' is {text!r}: no topic-partitions to assign")
    return tuple(sorted(set(pairs)))


def _reject(spec: OffsetSpec, kind: str, sentinel: int, reason: str) -> None:
    if spec.kind == kind:
        raise KafkaSourceError(f"option '{spec.option}' is '{kind}': it {reason}")
    if spec.kind == OFFSETS:
        for (topic, partition), offset in spec.values.items():
            if offset == sentinel:
                raise KafkaSourceError(f"option '{spec.option}' for {topic}-{partition} is "
                                       f"{sentinel} ({kind}): it {reason}")


def _timestamp(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise KafkaSourceError(f"option '{name}' is {text!r}: expected milliseconds since the "
                               "epoch as a single non-negative integer, like 1700000000000")
    return value


def _partition_json(text: str, name: str, *, minimum: int, what: str) -> dict[TopicPartitionKey, int]:
    example = '{"topicA":{"0":23,"1":-2}}' if what == "offset" else '{"topicA":{"0":1700000000000}}'
    data = _json(text, name, example)
    values: dict[TopicPartitionKey, int] = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, dict) or not partitions:
            raise KafkaSourceError(f"option '{name}' is {text!r}: topic {topic!r} must map to "
                                   f"an object of partition -> {what}, like {example}")
        for key, value in partitions.items():
            if not str(key).isdigit() or isinstance(value, bool) or not isinstance(value, int):
                raise KafkaSourceError(f"option '{name}' is {text!r}: {topic}/{key} -> {value!r} "
                                       f"is not partition number -> integer {what}")
            if value < minimum:
                extra = " (-2 = earliest, -1 = latest)" if what == "offset" else ""
                raise KafkaSourceError(f"option '{name}' for {topic}-{key} is {value}: expected "
                                       f"a {what} >= {minimum}{extra}")
            values[(topic, int(key))] = value
    return values


def _json(text: str, name: str, example: str) -> dict:
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not data:
        allowed = "'earliest', 'latest' or " if name.endswith("Offsets") else ""
        raise KafkaSourceError(f"option '{name}' is {text!r}: expected {allowed}a JSON object "
                               f"like {example}")
    return data


def _names(values: Mapping[TopicPartitionKey, int]) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(values))
