"""Stream records as the service holds them, and the filters clients apply to them.

A record is parsed once, in the consumer thread, into what filters need (its topic names and
city, case-folded) and the JSON text sent to clients; the SSE frame and the WebSocket message
are built once per record and shared by every client that receives it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from jobs.common.errors import KappaError

STREAMS = ("analyzed", "summaries")
SSE_EVENT = {"analyzed": "rsvp", "summaries": "summary"}
TOPIC_ITEM_KINDS = ("trending", "top_topics")


class FilterError(KappaError):
    """A client filter that cannot be applied (unknown stream, too many values)."""

    exit_code = 2


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka record of a followed stream, ready to fan out."""

    stream: str
    partition: int
    offset: int
    timestamp_ms: int
    data: str
    topics: frozenset[str] = frozenset()
    city: str | None = None
    kind: str | None = None
    event_id: str = ""
    source: tuple[str, int, int] | None = None
    """An analyzed record's source position (source_topic, source_partition, source_offset)."""
    sse: bytes = b""
    ws: str = ""

    def with_id(self, event_id: str) -> Record:
        """The record with its position id and pre-encoded frames."""
        event = SSE_EVENT[self.stream]
        sse = f"id: {event_id}\nevent: {event}\ndata: {self.data}\n\n".encode()
        ws = (f'{{"type":"event","id":"{event_id}","stream":"{self.stream}",'
              f'"partition":{self.partition},"offset":{self.offset},"data":{self.data}}}')
        return replace(self, event_id=event_id, sse=sse, ws=ws)


@dataclass(frozen=True, slots=True)
class Status:
    """A service message to one client (lagging, overflow, not retained, filter applied)."""

    status: str
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def sse(self) -> bytes:
        """As an SSE ``status`` event without id (the client's Last-Event-ID stays)."""
        return f"event: status\ndata: {self.json()}\n\n".encode()

    @property
    def ws(self) -> str:
        """As a WebSocket message."""
        return json.dumps({"type": "status", "status": self.status, **self.detail})

    def json(self) -> str:
        """The status as one line of JSON."""
        return json.dumps({"status": self.status, **self.detail}, separators=(",", ":"))


def build_record(stream: str, partition: int, offset: int, timestamp_ms: int,
                 value: bytes | None) -> Record | None:
    """Parse one Kafka value of a stream; None when it is not a JSON object (counted, skipped)."""
    try:
        obj = json.loads(value) if value else None
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict):
        return None
    text = value.decode() if value and b"\n" not in value else json.dumps(obj, separators=(",", ":"))
    kind = obj.get("kind") if stream == "summaries" else None
    return Record(stream, partition, offset, timestamp_ms, text, _topics(obj, kind),
                  _fold(obj.get("city")), kind, source=source_of(obj))


def source_of(obj: dict[str, Any]) -> tuple[str, int, int] | None:
    """An analyzed record's source position, or None when it carries none."""
    topic, partition, offset = obj.get("source_topic"), obj.get("source_partition"), obj.get("source_offset")
    if isinstance(topic, str) and isinstance(partition, int) and isinstance(offset, int):
        return topic, partition, offset
    return None


def _topics(obj: dict[str, Any], kind: Any) -> frozenset[str]:
    if kind in TOPIC_ITEM_KINDS:
        names: Iterable[Any] = (item.get("item") for item in obj.get("items") or []
                                if isinstance(item, dict))
    else:
        names = obj.get("topics") or []
    return frozenset(folded for name in names if (folded := _fold(name)))


def _fold(value: Any) -> str | None:
    return " ".join(value.split()).casefold() if isinstance(value, str) and value.strip() else None


@dataclass(frozen=True, slots=True)
class Filter:
    """What a client wants: streams, and optionally topic names and/or cities (any of each).

    A record matches when it belongs to one of the streams and, for each of ``topics`` and
    ``cities`` that is given, it carries that dimension with a value in the set: an RSVP its
    topics and city, a ``city_window`` summary its city, a ``trending``/``top_topics`` summary
    the topic names of its items. Summaries without the dimension (``members_window``,
    ``event``) reach only clients that do not filter on it.
    """

    streams: frozenset[str] = frozenset(STREAMS)
    topics: frozenset[str] = frozenset()
    cities: frozenset[str] = frozenset()

    def matches(self, record: Record) -> bool:
        """Whether the record passes this filter."""
        if record.stream not in self.streams:
            return False
        if self.topics and self.topics.isdisjoint(record.topics):
            return False
        return not self.cities or record.city in self.cities

    def describe(self) -> dict[str, list[str]]:
        """The filter as JSON-able lists (sorted)."""
        return {"streams": sorted(self.streams), "topics": sorted(self.topics),
                "cities": sorted(self.cities)}


def make_filter(streams: Iterable[str] | None, topics: Iterable[str] | None,
                cities: Iterable[str] | None, max_values: int) -> Filter:
    """Validate client-given filter values (streams may also be comma-separated)."""
    wanted = _values(streams, split=True) or list(STREAMS)
    unknown = sorted(set(wanted) - set(STREAMS))
    if unknown:
        raise FilterError(f"unknown stream {unknown[0]!r}: choose from {list(STREAMS)}")
    folded_topics = {f for t in _values(topics) if (f := _fold(t))}
    folded_cities = {f for c in _values(cities) if (f := _fold(c))}
    for name, values in (("topic", folded_topics), ("city", folded_cities)):
        if len(values) > max_values:
            raise FilterError(f"at most {max_values} {name} values per filter, found {len(values)}")
    return Filter(frozenset(wanted), frozenset(folded_topics), frozenset(folded_cities))


def _values(raw: Iterable[str] | str | None, split: bool = False) -> list[str]:
    if raw is None:
        return []
    items = [raw] if isinstance(raw, str) else list(raw)
    parts = [part for item in items for part in (str(item).split(",") if split else [str(item)])]
    return [part.strip() for part in parts if part.strip()]
