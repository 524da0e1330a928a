"""Stream records as the service holds them, and the filters clients apply to them.

A record is parsed once, in the consumer thread, into what filters need (the values of each
filter dimension the followed pipeline declares, case-folded) and the JSON text sent to
clients; the SSE frame and the WebSocket message are built once per record and shared by every
client that receives it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from jobs.errors import KappaError

if TYPE_CHECKING:
    from jobs.pipelines.spec import PipelineSpec

STREAMS = ("analyzed", "summaries")
SUMMARY_EVENT = "summary"
"""The SSE event of a summaries record (an analyzed record's is the pipeline's name)."""
NOTHING: frozenset[str] = frozenset()


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
    values: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Each filter dimension's values the record carries (case-folded), by dimension name."""
    kind: str | None = None
    sse_event: str = SUMMARY_EVENT
    position_id: str = ""
    source: tuple[str, int, int] | None = None
    """An analyzed record's source position (source_topic, source_partition, source_offset)."""
    sse: bytes = b""
    ws: str = ""

    def with_id(self, position_id: str) -> Record:
        """The record with its position id and pre-encoded frames."""
        sse = f"id: {position_id}\nevent: {self.sse_event}\ndata: {self.data}\n\n".encode()
        ws = (f'{{"type":"event","id":"{position_id}","stream":"{self.stream}",'
              f'"partition":{self.partition},"offset":{self.offset},"data":{self.data}}}')
        return replace(self, position_id=position_id, sse=sse, ws=ws)


@dataclass(frozen=True, slots=True)
class Dimension:
    """A dimension clients filter the streams by: one ``serve.filters`` entry of the pipeline."""

    name: str
    """The query parameter (``colour``), repeatable."""
    plural: str
    """The key in a WebSocket filter message and in the filter a client is told (``colours``)."""
    paths: tuple[tuple[str, ...], ...]
    """Where a record holds the values; a list met on the way is walked element by element."""
    description: str = ""

    def values(self, obj: Mapping[str, Any]) -> frozenset[str]:
        """The case-folded values ``obj`` carries at any of the paths."""
        found: set[str] = set()
        for first, *rest in self.paths:
            _collect(obj.get(first), rest, found)
        return frozenset(found) if found else NOTHING


def _collect(value: Any, path: list[str], found: set[str]) -> None:
    if isinstance(value, str):
        if not path and (folded := _fold(value)):
            found.add(folded)
    elif isinstance(value, list):
        for item in value:
            _collect(item, path, found)
    elif path and isinstance(value, dict):
        _collect(value.get(path[0]), path[1:], found)


@dataclass(frozen=True, slots=True)
class StreamShape:
    """What the followed pipeline says of its streams: its analyzed records' SSE event, its filters."""

    event: str
    """The SSE event of an analyzed record: the pipeline's name."""
    dimensions: tuple[Dimension, ...] = ()

    def record(self, stream: str, partition: int, offset: int, timestamp_ms: int,
               value: bytes | None) -> Record | None:
        """Parse one Kafka value of a stream; None when it is not a JSON object (counted, skipped)."""
        obj = _object(value)
        if obj is None:
            return None
        text = value.decode() if value and b"\n" not in value else json.dumps(obj, separators=(",", ":"))
        values = {d.name: found for d in self.dimensions if (found := d.values(obj))}
        kind = obj.get("kind") if stream == "summaries" else None
        event = self.event if stream == "analyzed" else SUMMARY_EVENT
        return Record(stream, partition, offset, timestamp_ms, text, values, kind, event,
                      source=source_of(obj))

    def make_filter(self, streams: Iterable[str] | None, wanted: Mapping[str, Iterable[str] | None],
                    max_values: int) -> Filter:
        """Validate client-given filter values, ``wanted`` by dimension (streams may be comma-separated)."""
        chosen = _values(streams, split=True) or list(STREAMS)
        unknown = sorted(set(chosen) - set(STREAMS))
        if unknown:
            raise FilterError(f"unknown stream {unknown[0]!r}: choose from {list(STREAMS)}")
        terms = []
        for dimension in self.dimensions:
            folded = frozenset(f for v in _values(wanted.get(dimension.name)) if (f := _fold(v)))
            if len(folded) > max_values:
                raise FilterError(f"at most {max_values} {dimension.name} values per filter, "
                                  f"found {len(folded)}")
            terms.append((dimension, folded))
        return Filter(frozenset(chosen), tuple(terms))


def shape_of(spec: PipelineSpec) -> StreamShape:
    """The stream shape a pipeline declares (its name, its ``serve.filters``)."""
    return StreamShape(spec.name, tuple(
        Dimension(name, declared.plural, tuple(tuple(path.split(".")) for path in declared.fields),
                  declared.description)
        for name, declared in spec.serve.filters.items()))


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


def _object(value: bytes | None) -> dict[str, Any] | None:
    try:
        obj = json.loads(value) if value else None
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def source_in(value: bytes | None) -> tuple[str, int, int] | None:
    """The source position a Kafka value of the analyzed stream carries, or None."""
    obj = _object(value)
    return source_of(obj) if obj is not None else None


def source_of(obj: dict[str, Any]) -> tuple[str, int, int] | None:
    """An analyzed record's source position, or None when it carries none."""
    topic, partition, offset = obj.get("source_topic"), obj.get("source_partition"), obj.get("source_offset")
    if isinstance(topic, str) and isinstance(partition, int) and isinstance(offset, int):
        return topic, partition, offset
    return None


def _fold(value: Any) -> str | None:
    return " ".join(value.split()).casefold() if isinstance(value, str) and value.strip() else None


@dataclass(frozen=True, slots=True)
class Filter:
    """What a client wants: streams, and for each filter dimension the values it wants (any of them).

    A record matches when it belongs to one of the streams and, for each dimension with values,
    it carries one of them. A record without the dimension reaches only clients that do not
    filter on it.
    """

    streams: frozenset[str] = frozenset(STREAMS)
    terms: tuple[tuple[Dimension, frozenset[str]], ...] = ()

    def matches(self, record: Record) -> bool:
        """Whether the record passes this filter."""
        if record.stream not in self.streams:
            return False
        for dimension, wanted in self.terms:
            if wanted and wanted.isdisjoint(record.values.get(dimension.name, NOTHING)):
                return False
        return True

    def describe(self) -> dict[str, list[str]]:
        """The filter as JSON-able lists (sorted), by stream and dimension plural."""
        return {"streams": sorted(self.streams),
                **{dimension.plural: sorted(wanted) for dimension, wanted in self.terms}}


def _values(raw: Iterable[str] | str | None, split: bool = False) -> list[str]:
    if raw is None:
        return []
    items = [raw] if isinstance(raw, str) else list(raw)
    parts = [part for item in items for part in (str(item).split(",") if split else [str(item)])]
    return [part.strip() for part in parts if part.strip()]
