"""The outputs of one RSVP record, in plain Python: analyzed record, summary increments.

Pure functions of their arguments (no clients, no Spark), shared by the streaming job's per-task
pass (jobs/streaming/task.py, through :data:`RECORDS`), the DataFrame transforms
(:mod:`pipelines.rsvp.transforms`) and the tests. Contracts in docs/streaming.md
("rsvps.analyzed", "What counts").
"""

from __future__ import annotations

from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

import msgspec

from jobs.streaming.aggregates import increment_row
from jobs.streaming.codec import RecordCodec
from pipelines.rsvp.aggregates import Windows, windows_from
from pipelines.rsvp.redis_views import (
    CITY,
    EVENT,
    MEMBER,
    MEMBER_ALL,
    MEMBERS,
    TOPIC,
    TOPIC_MINUTE,
    RsvpViews,
)
from pipelines.rsvp.validate import coordinates, normalize_city, parse, rules_from

ANALYZED_SCHEMA_VERSION = 1
ANALYZED_COLUMNS = (
    "schema_version", "rsvp_id", "event_time_ms", "event_time", "event_id", "event_name",
    "group_id", "group_name", "member_id", "response", "guests", "topics", "city", "country",
    "state", "lat", "lon", "venue_id", "source_topic", "source_partition", "source_offset",
    "kafka_timestamp_ms", "ingest_lag_ms", "late")
_encode = msgspec.json.Encoder().encode


_SECONDS: dict[int, str] = {}
_SECONDS_KEPT = 100_000


def event_time(ms: int) -> str:
    """``yyyy-MM-ddTHH:mm:ss.SSSZ`` of epoch milliseconds, UTC."""
    seconds, millis = divmod(ms, 1000)
    prefix = _SECONDS.get(seconds)
    if prefix is None:
        if len(_SECONDS) >= _SECONDS_KEPT:
            _SECONDS.clear()
        prefix = _SECONDS[seconds] = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
    return f"{prefix}{millis:03d}Z"


def _topic_names(group: Any) -> list[str]:
    names = [topic.topic_name for topic in group.group_topics]
    if len(names) > 1 and len(set(names)) < len(names):
        return list(dict.fromkeys(names))
    return names


def analyzed(rsvp: Any, topic: str, partition: int, offset: int, kafka_ms: int | None, *,
             late: bool) -> dict[str, Any]:
    """The normalized analyzed record (version 1) of a valid typed RSVP, in column order.

    ``late``: whether the record is late at its position (jobs/streaming/stream_time.py).
    """
    group, venue, mtime = rsvp.group, rsvp.venue, rsvp.mtime
    lat, lon = coordinates(rsvp)
    return {
        "schema_version": ANALYZED_SCHEMA_VERSION, "rsvp_id": rsvp.rsvp_id, "event_time_ms": mtime,
        "event_time": event_time(mtime), "event_id": rsvp.event.event_id,
        "event_name": rsvp.event.event_name, "group_id": group.group_id,
        "group_name": group.group_name, "member_id": rsvp.member.member_id,
        "response": rsvp.response, "guests": rsvp.guests, "topics": _topic_names(group),
        "city": normalize_city(group.group_city), "country": group.group_country.strip(" ").upper(),
        "state": group.group_state, "lat": lat, "lon": lon,
        "venue_id": venue.venue_id if venue is not None else None,
        "source_topic": topic, "source_partition": partition, "source_offset": offset,
        "kafka_timestamp_ms": kafka_ms,
        "ingest_lag_ms": kafka_ms - mtime if kafka_ms is not None else None,
        "late": late,
    }


def analyzed_value(record: dict[str, Any]) -> bytes:
    """The JSON value of an analyzed record on rsvps.analyzed (nulls included, column order)."""
    return _encode(record)


class Increments:
    """Summary increments of analyzed records, summed by (kind, window_start, item).

    Windowed kinds (``city``, ``topic_minute``, ``member``) count on-time records only; all-time
    kinds (``topic``, ``member_all``, ``event``) every record. ``n`` is the count (``yes``
    responses for ``event``); for ``event``, ``n2`` counts ``no`` responses and ``n3`` sums the
    guests (:data:`~pipelines.rsvp.redis_views.EVENT_SUMS`); ``label`` the event name
    (the greatest seen). Trending windows are built in Redis from the per-slide ``topic_minute``
    buckets.
    """

    def __init__(self, windows: Windows) -> None:
        self.windows = windows
        self.windowed: dict[str, dict[tuple[int, str], int]] = {CITY: {}, TOPIC_MINUTE: {}, MEMBER: {}}
        self.all_time: dict[str, dict[str, int]] = {TOPIC: {}, MEMBER_ALL: {}}
        self.events: dict[str, list[Any]] = {}

    def __len__(self) -> int:
        return (sum(map(len, self.windowed.values())) + sum(map(len, self.all_time.values()))
                + len(self.events))

    def add(self, record: dict[str, Any]) -> None:
        """Count one analyzed record."""
        w, ms = self.windows, record["event_time_ms"]
        member, topics = str(record["member_id"]), record["topics"]
        all_topics, all_members = self.all_time[TOPIC], self.all_time[MEMBER_ALL]
        all_members[member] = all_members.get(member, 0) + 1
        for topic in topics:
            all_topics[topic] = all_topics.get(topic, 0) + 1
        if not record["late"]:
            cities, minutes, members = (self.windowed[CITY], self.windowed[TOPIC_MINUTE],
                                        self.windowed[MEMBER])
            key = (ms // w.city_ms * w.city_ms, record["city"])
            cities[key] = cities.get(key, 0) + 1
            key = (ms // w.members_ms * w.members_ms, member)
            members[key] = members.get(key, 0) + 1
            minute = ms // w.trending_slide_ms * w.trending_slide_ms
            for topic in topics:
                key = (minute, topic)
                minutes[key] = minutes.get(key, 0) + 1
        event = self.events.get(record["event_id"])
        if event is None:
            event = self.events[record["event_id"]] = [0, 0, 0, record["event_name"]]
        elif record["event_name"] > event[3]:
            event[3] = record["event_name"]
        if record["response"] == "yes":
            event[0] += 1
            event[2] += record["guests"]
        else:
            event[1] += 1

    def take_members(self) -> dict[int, list[str]]:
        """Remove the member ids and return them by window start (-1: the all-time set)."""
        members: dict[int, list[str]] = {}
        for start, member in self.windowed[MEMBER]:
            members.setdefault(start, []).append(member)
        if self.all_time[MEMBER_ALL]:
            members[-1] = list(self.all_time[MEMBER_ALL])
        self.windowed[MEMBER], self.all_time[MEMBER_ALL] = {}, {}
        return members

    def rows(self) -> list[dict[str, Any]]:
        """One dict per key: kind, window_start, item, n, n2, n3, label."""
        out = [increment_row(kind, start, item, n) for kind, counts in self.windowed.items()
               for (start, item), n in counts.items()]
        out += [increment_row(kind, 0, item, n) for kind, counts in self.all_time.items()
                for item, n in counts.items()]
        out += [increment_row(EVENT, 0, item, yes, no, guests, label)
                for item, (yes, no, guests, label) in self.events.items()]
        return out


RECORDS = RecordCodec(parse=parse, event_ms=attrgetter("mtime"), analyzed=analyzed,
                      analyzed_value=analyzed_value, analyzed_key="event_id", counter=Increments,
                      rules=rules_from, windows=windows_from, views=RsvpViews, distinct=MEMBERS)
"""What the streaming job calls per RSVP (registered in pipelines/rsvp/pipeline.py)."""
