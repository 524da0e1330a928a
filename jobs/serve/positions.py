"""Stream positions: the Kafka position vector every streamed event carries as its id.

An event id is the vector of *next offsets* of every partition of every stream the service
follows, as of just after that event, e.g. ``a:42,17,9;s:5,3,0`` (stream code, then one offset
per partition in partition order; ``a`` = the analyzed topic, ``s`` = the summaries topic).
Every record of partition ``p`` below ``vector[p]`` was either delivered to the client or did
not match its filter, so a client resuming from an id receives exactly the records it has not
seen.

Offsets belong to one view version's topics (docs/reprocess.md): ids of version N >= 2 start with
``v<N>/`` (``v3/a:42,17,9;s:5,3,0``); version 1's have no tag.
"""

from __future__ import annotations

from collections.abc import Mapping

from jobs.errors import KappaError

STREAM_CODES = {"analyzed": "a", "summaries": "s"}
CODE_STREAMS = {code: name for name, code in STREAM_CODES.items()}
MAX_ID_CHARS = 4096

Vector = dict[str, list[int]]


class PositionError(KappaError):
    """A Last-Event-ID (or ``last_event_id``) that is not a position vector of this service."""

    exit_code = 2


def encode(vector: Mapping[str, list[int]], version: int = 1) -> str:
    """The event id of a position vector (streams in a fixed order) of view version ``version``."""
    body = ";".join(f"{STREAM_CODES[stream]}:{','.join(map(str, offsets))}"
                    for stream, offsets in sorted(vector.items()) if offsets)
    return body if version == 1 else f"v{version}/{body}"


def view_of(position_id: str) -> int:
    """The view version an event id belongs to (1 without a tag)."""
    tag, sep, _ = position_id.strip().partition("/")
    if sep and tag.startswith("v") and tag[1:].isdigit():
        return int(tag[1:])
    return 1


def parse(position_id: str) -> Vector:
    """Parse an event id back to a vector; raise PositionError saying what is wrong."""
    text = position_id.strip()
    if view_of(text) != 1:
        text = text.partition("/")[2]
    if not text or len(text) > MAX_ID_CHARS:
        raise PositionError(f"event id must be 1..{MAX_ID_CHARS} characters like 'a:42,17,9;s:5,3,0', "
                            f"found {len(text)} characters")
    vector: Vector = {}
    for part in text.split(";"):
        code, sep, offsets = part.partition(":")
        if not sep or code not in CODE_STREAMS:
            raise PositionError(f"event id part {part!r} must be '<a|s>:<offset>,<offset>...' "
                                f"(a = analyzed, s = summaries); reconnect without Last-Event-ID")
        try:
            values = [int(value) for value in offsets.split(",")]
        except ValueError:
            raise PositionError(f"event id part {part!r}: offsets must be integers") from None
        if any(value < 0 for value in values):
            raise PositionError(f"event id part {part!r}: offsets must not be negative")
        vector[CODE_STREAMS[code]] = values
    return vector


def copy(vector: Mapping[str, list[int]]) -> Vector:
    """A deep copy (vectors are mutated in place by the hub)."""
    return {stream: list(offsets) for stream, offsets in vector.items()}


def merge_missing(resume: Mapping[str, list[int]], current: Mapping[str, list[int]]) -> Vector:
    """The resume vector, with the current position for streams/partitions it does not name."""
    merged = copy(current)
    for stream, offsets in resume.items():
        if stream not in merged:
            continue
        for partition, offset in enumerate(offsets[: len(merged[stream])]):
            merged[stream][partition] = offset
    return merged


def covers(start: Mapping[str, list[int]], resume: Mapping[str, list[int]], streams: set[str]) -> bool:
    """Whether a buffer holding everything from ``start`` on contains all records after ``resume``."""
    return all(first <= wanted
               for stream in streams
               for first, wanted in zip(start[stream], resume[stream], strict=True))


def behind(resume: Mapping[str, list[int]], current: Mapping[str, list[int]],
           streams: set[str]) -> int:
    """How many offsets lie between ``resume`` and ``current`` (records to catch up, at most)."""
    return sum(max(0, now - wanted)
               for stream in streams
               for wanted, now in zip(resume[stream], current[stream], strict=True))
