"""The outputs of one RSVP record, in plain Python: analyzed record, dead letter, summary increments.

Pure functions of their arguments (no clients, no Spark), shared by the job's per-task pass
(:mod:`jobs.streaming.task`), the DataFrame transforms (:mod:`jobs.streaming.transforms`) and the
tests. Contracts in docs/streaming.md ("rsvps.analyzed", "rsvps.dlq", "What counts").
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import msgspec

from jobs.streaming.aggregates import CITY, EVENT, MEMBER, MEMBER_ALL, TOPIC, TOPIC_MINUTE, Windows
from jobs.streaming.validate import coordinates, normalize_city

ANALYZED_SCHEMA_VERSION = 1
ANALYZED_COLUMNS = (
    "schema_version", "rsvp_id", "event_time_ms", "event_time", "event_id", "event_name",
    "group_id", "group_name", "member_id", "response", "guests", "topics", "city", "country",
    "state", "lat", "lon", "venue_id", "source_topic", "source_partition", "source_offset",
    "kafka_timestamp_ms", "ingest_lag_ms", "late")
MAX_DLQ_VALUE_BYTES = 1 << 20
_encode = msgspec.json.Encoder().encode


def event_time(ms: int) -> str:
    """``yyyy-MM-ddTHH:mm:ss.SSSZ`` of epoch milliseconds, UTC."""
    seconds, millis = divmod(ms, 1000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{millis:03d}Z"


def analyzed(rsvp: Any, topic: str, partition: int, offset: int, kafka_ms: int | None, *,
             watermark_ms: int | None) -> dict[str, Any]:
    """The normalized analyzed record (version 1) of a valid typed RSVP, in column order.

    ``late`` is true when the event time is below ``watermark_ms`` (None: no watermark yet).
    """
    group, venue, mtime = rsvp.group, rsvp.venue, rsvp.mtime
    lat, lon = coordinates(rsvp)
    return {
        "schema_version": ANALYZED_SCHEMA_VERSION, "rsvp_id": rsvp.rsvp_id, "event_time_ms": mtime,
        "event_time": event_time(mtime), "event_id": rsvp.event.event_id,
        "event_name": rsvp.event.event_name, "group_id": group.group_id,
        "group_name": group.group_name, "member_id": rsvp.member.member_id,
        "response": rsvp.response, "guests": rsvp.guests,
        "topics": list(dict.fromkeys(t.topic_name for t in group.group_topics)),
        "city": normalize_city(group.group_city), "country": group.group_country.strip(" ").upper(),
        "state": group.group_state, "lat": lat, "lon": lon,
        "venue_id": venue.venue_id if venue is not None else None,
        "source_topic": topic, "source_partition": partition, "source_offset": offset,
        "kafka_timestamp_ms": kafka_ms,
        "ingest_lag_ms": kafka_ms - mtime if kafka_ms is not None else None,
        "late": watermark_ms is not None and mtime < watermark_ms,
    }


def analyzed_value(record: dict[str, Any]) -> bytes:
    """The JSON value of an analyzed record on rsvps.analyzed (nulls included, column order)."""
    return _encode(record)


def dead_letter_headers(reason: str, topic: str, partition: int, offset: int,
                        size: int) -> list[tuple[str, bytes]]:
    """The reason headers of a dead letter (the collector's names), plus the original size if cut."""
    headers = [
        ("kappa.reason", reason.encode()),
        ("kappa.source", f"stream:{topic}/{partition}/{offset}".encode()),
        ("kappa.source_topic", topic.encode()),
        ("kappa.source_partition", str(partition).encode()),
        ("kappa.source_offset", str(offset).encode()),
    ]
    if size > MAX_DLQ_VALUE_BYTES:
        headers.append(("kappa.original_bytes", str(size).encode()))
    return headers


def dead_letter_value(value: bytes | None) -> bytes | None:
    """The original bytes, cut to MAX_DLQ_VALUE_BYTES."""
    if value is not None and len(value) > MAX_DLQ_VALUE_BYTES:
        return value[:MAX_DLQ_VALUE_BYTES]
    return value


class Increments:
    """Summary increments of analyzed records, summed by (kind, window_start, item).

    Windowed kinds (``city``, ``topic_minute``, ``member``) count on-time records only; all-time
    kinds (``topic``, ``member_all``, ``event``) every record. ``n`` is the count (``yes``
    responses for ``event``); ``no`` and ``guests`` only for ``event``; ``label`` the event name.
    Trending windows are built in Redis from the per-slide ``topic_minute`` buckets.
    """

    def __init__(self, windows: Windows) -> None:
        self.windows = windows
        self.counts: dict[tuple[str, int, str], list[Any]] = {}

    def _bump(self, key: tuple[str, int, str], n: int = 1) -> None:
        entry = self.counts.get(key)
        if entry is None:
            self.counts[key] = [n, 0, 0, None]
        else:
            entry[0] += n

    def add(self, record: dict[str, Any]) -> None:
        """Count one analyzed record."""
        w, ms, bump = self.windows, record["event_time_ms"], self._bump
        on_time = not record["late"]
        member = str(record["member_id"])
        if on_time:
            bump((CITY, ms // w.city_ms * w.city_ms, record["city"]))
            bump((MEMBER, ms // w.members_ms * w.members_ms, member))
        bump((MEMBER_ALL, 0, member))
        minute = ms // w.trending_slide_ms * w.trending_slide_ms
        for topic in record["topics"]:
            bump((TOPIC, 0, topic))
            if on_time:
                bump((TOPIC_MINUTE, minute, topic))
        key = (EVENT, 0, record["event_id"])
        entry = self.counts.get(key)
        if entry is None:
            entry = self.counts[key] = [0, 0, 0, record["event_name"]]
        elif entry[3] is None or record["event_name"] > entry[3]:
            entry[3] = record["event_name"]
        if record["response"] == "yes":
            entry[0] += 1
            entry[2] += record["guests"]
        else:
            entry[1] += 1

    def rows(self) -> list[dict[str, Any]]:
        """One dict per key: kind, window_start, item, n, no, guests, label."""
        return [{"kind": kind, "window_start": start, "item": item, "n": n, "no": no,
                 "guests": guests, "label": label}
                for (kind, start, item), (n, no, guests, label) in self.counts.items()]


def merge_increments(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sum increment rows of several tasks by key (label: the greatest)."""
    merged: dict[tuple[str, int, str], dict[str, Any]] = {}
    for row in rows:
        key = (row["kind"], row["window_start"], row["item"])
        into = merged.get(key)
        if into is None:
            merged[key] = dict(row)
            continue
        for name in ("n", "no", "guests"):
            into[name] += row[name]
        if row["label"] is not None and (into["label"] is None or row["label"] > into["label"]):
            into["label"] = row["label"]
    return list(merged.values())
