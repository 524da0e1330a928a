"""The batch tests' input and, in plain Python, what the platform must make of it.

Written from the docs, never with the code under test: the collector rejects what the generator
says it malformed (docs/collector.md); the streaming job dead-letters the business-rule failures
and decides lateness by stream time, per partition in offset order (docs/streaming.md "Dead
letters", "Late records: stream time"); the live views count every valid delivery by its Kafka
position, windowed ones only when on time ("What counts", "Redis keys"); ``silver.rsvps`` keeps
the latest version of each ``rsvp_id`` and the batch tables count as docs/tables.md "Batch
tables" documents.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from pipelines.rsvp.generator import FaultMix, RsvpGenerator
from tests.integration.batch.pipeline import Message

FAULTS = FaultMix(late=0.08, out_of_order=0.04, duplicates=0.08, malformed=0.04)
WATERMARK_MS = 60_000            # streaming.watermark_s
FUTURE_SKEW_MS = 300_000         # streaming.future_skew_s
MIN_EVENT_MS = 946_684_800_000   # 2000-01-01
HOUR_MS = 3_600_000
WINDOW_MS = 60_000               # streaming.city_window_s and members_window_s
SLIDE_MS, TRENDING_MS = 60_000, 600_000   # streaming.trending_slide_s, trending_window_s
COLLECTED, STREAM = "file", "stream"   # kinds of kappa.source: a file pull, the streaming job


@dataclass(frozen=True)
class Line:
    """One input line and, when the collector must reject it, the reason code it must give."""

    value: bytes
    rejected: str | None = None


@dataclass(frozen=True)
class Rsvp:
    """One valid delivery as the streaming job analyzes it."""

    rsvp_id: int
    event_time_ms: int
    event_id: str
    event_name: str
    group_id: int
    member_id: int
    response: str
    guests: int
    topics: tuple[str, ...]
    city: str
    country: str
    late: bool
    partition: int
    offset: int

    @property
    def day(self) -> date:
        """The event date (UTC)."""
        return day_of(self.event_time_ms)


def two_days_before(today: date) -> tuple[int, int]:
    """Event time of the input: from 01:00 two days before ``today`` to 23:00 the day before (UTC),
    so late records stay on the first of the two dates and none falls on ``today``."""
    midnight = datetime.combine(today, datetime.min.time(), UTC).timestamp() * 1000
    return int(midnight) - 47 * HOUR_MS, 46 * HOUR_MS


def rsvp_lines(count: int, start_ms: int, span_ms: int, seed: int = 1) -> list[Line]:
    """``count`` generated lines over ``span_ms`` of event time (late, out-of-order, duplicate and
    malformed ones), plus two the collector accepts and the streaming job must dead-letter."""
    generated = list(RsvpGenerator(seed=seed, faults=FAULTS, start_ms=start_ms,
                                   events_per_second=count * 1000 / span_ms).generate(count))
    lines = [Line(g.line, g.kind.split(":", 1)[1] if g.malformed else None) for g in generated]
    valid = [json.loads(g.line) for g in generated if g.kind == "ok"]
    maybe = dict(valid[len(valid) // 3], response="maybe")        # a second delivery of an RSVP
    ancient = dict(valid[len(valid) // 2], rsvp_id=max(r["rsvp_id"] for r in valid) + 1,
                   mtime=MIN_EVENT_MS - 1_000)
    lines.insert(count // 3, Line(_dumps(maybe)))
    lines.insert(2 * count // 3, Line(_dumps(ancient)))
    return lines


def _dumps(record: dict) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode()


def day_of(ms: int) -> date:
    return datetime.fromtimestamp(ms / 1000, UTC).date()


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _reason(record: dict, kafka_ms: int) -> str | None:
    venue = record.get("venue") or {"lat": record["group"]["group_lat"], "lon": record["group"]["group_lon"]}
    if (record["response"] not in ("yes", "no") or record["guests"] < 0 or not -90 <= venue["lat"] <= 90
            or not -180 <= venue["lon"] <= 180 or not record["group"]["group_city"].strip()):
        return "invalid_value"
    if not MIN_EVENT_MS <= record["mtime"] <= kafka_ms + FUTURE_SKEW_MS:
        return "bad_event_time"
    return None


def stream(raw: Iterable[Message]) -> tuple[list[Rsvp], dict[tuple[int, int], str]]:
    """The valid deliveries of the raw topic (with their ``late`` flag) and the dead letters'
    reason codes by position: each partition folded in offset order."""
    delivered, dead = [], {}
    partitions: dict[int, list[Message]] = defaultdict(list)
    for message in raw:
        partitions[message.partition].append(message)
    for partition, messages in sorted(partitions.items()):
        stream_ms: int | None = None
        for message in sorted(messages, key=lambda m: m.offset):
            record = json.loads(message.value)
            reason = _reason(record, message.timestamp_ms)
            if reason is not None:
                dead[(partition, message.offset)] = reason
                continue
            mtime, group = record["mtime"], record["group"]
            late = stream_ms is not None and mtime < stream_ms - WATERMARK_MS
            stream_ms = mtime if stream_ms is None else max(stream_ms, mtime)
            delivered.append(Rsvp(
                record["rsvp_id"], mtime, record["event"]["event_id"], record["event"]["event_name"],
                group["group_id"], record["member"]["member_id"], record["response"], record["guests"],
                tuple(t["topic_name"] for t in group["group_topics"]),
                " ".join(w[:1].upper() + w[1:].lower() for w in group["group_city"].split()),
                group["group_country"].upper(), late, partition, message.offset))
    return delivered, dead


def silver(delivered: Iterable[Rsvp]) -> list[Rsvp]:
    """One row per ``rsvp_id``: the latest event time wins, then the higher source offset."""
    latest: dict[int, Rsvp] = {}
    for rsvp in delivered:
        kept = latest.get(rsvp.rsvp_id)
        if kept is None or (rsvp.event_time_ms, rsvp.offset) >= (kept.event_time_ms, kept.offset):
            latest[rsvp.rsvp_id] = rsvp
    return list(latest.values())


def _grouped(rows: Iterable[Any], key: Callable[[Any], Any]) -> dict[Any, list[Any]]:
    groups: dict[Any, list[Any]] = defaultdict(list)
    for row in rows:
        groups[key(row)].append(row)
    return groups


def _yes(rows: Iterable[Rsvp]) -> int:
    return sum(r.response == "yes" for r in rows)


def city_daily(rows: Sequence[Rsvp]) -> list[tuple]:
    """gold.city_daily of silver ``rows``, sorted."""
    out = []
    for (day, city, country), group in _grouped(rows, lambda r: (r.day, r.city, r.country)).items():
        yes = _yes(group)
        out.append((day, city, country, len(group), yes, len(group) - yes, sum(r.guests for r in group),
                    len({r.member_id for r in group}), len({r.event_id for r in group}),
                    sum(r.late for r in group) / len(group)))
    return sorted(out)


def topic_daily(rows: Sequence[Rsvp]) -> list[tuple]:
    """gold.topic_daily of silver ``rows``, sorted (rank: 1 + topics of the day with more RSVPs)."""
    pairs = [(r.day, topic, r) for r in rows for topic in set(r.topics)]
    groups = _grouped(pairs, lambda pair: pair[:2])
    counts = {key: len(group) for key, group in groups.items()}
    return sorted((day, topic, len(group), _yes(p[2] for p in group), len({p[2].group_id for p in group}),
                   1 + sum(n > len(group) for (other, _), n in counts.items() if other == day))
                  for (day, topic), group in groups.items())


def event_stats(rows: Sequence[Rsvp], delivered: Sequence[Rsvp]) -> list[tuple]:
    """gold.event_stats: silver ``rows`` per date and event, with every valid delivery beside."""
    every = _grouped(delivered, lambda r: (r.day, r.event_id))
    out = []
    for key, group in _grouped(rows, lambda r: (r.day, r.event_id)).items():
        times, all_rows = [r.event_time_ms for r in group], every.get(key, [])
        guests = sum(r.guests for r in group if r.response == "yes")
        all_guests = sum(r.guests for r in all_rows if r.response == "yes")
        out.append((*key, max(r.event_name for r in group), _ts(min(times)), _ts(max(times)), len(group),
                    _yes(group), len(group) - _yes(group), guests, len(all_rows), _yes(all_rows),
                    len(all_rows) - _yes(all_rows), all_guests, _yes(group) + guests))
    return sorted(out)


def dlq_daily(dead: Iterable[tuple[int, str, str]]) -> list[tuple]:
    """ops.dlq_daily of dead letters given as (Kafka timestamp ms, reason code, source kind)."""
    groups = _grouped(dead, lambda d: (day_of(d[0]), d[1], d[2]))
    return sorted((*key, len(group), _ts(min(d[0] for d in group)), _ts(max(d[0] for d in group)))
                  for key, group in groups.items())


def live_views(delivered: Sequence[Rsvp]) -> dict[str, dict[str, Any]]:
    """What Redis must hold, in the keys of ``rsvps.summaries``: on-time deliveries per window and
    city, distinct members per window (exact); every delivery per event and per topic."""
    on_time = [r for r in delivered if not r.late]
    cities = _grouped(on_time, lambda r: (r.event_time_ms // WINDOW_MS * WINDOW_MS, r.city))
    members = _grouped(on_time, lambda r: r.event_time_ms // WINDOW_MS * WINDOW_MS)
    events = _grouped(delivered, lambda r: r.event_id)
    topics = _grouped([(topic, r) for r in delivered for topic in r.topics], lambda pair: pair[0])
    return {
        "city_window": {f"city_window/{start}/{city}": len(group) for (start, city), group in cities.items()},
        "members_window": {f"members_window/{start}": len({r.member_id for r in group})
                           for start, group in members.items()},
        "event": {f"event/{event}": [_yes(group), len(group) - _yes(group),
                                     sum(r.guests for r in group if r.response == "yes")]
                  for event, group in events.items()},
        "topic": {f"topic/{topic}": len(group) for topic, group in topics.items()},
    }


def redis_views(delivered: Sequence[Rsvp], dead: int) -> dict[str, dict[str, Any]]:
    """:func:`live_views` and what only Redis holds (docs/streaming.md "Redis keys"): on-time
    deliveries per minute bucket and topic, per 10-minute window (every minute) and topic; the
    totals of valid, late and ``dead`` dead-lettered records; distinct members of every delivery."""
    on_time = [r for r in delivered if not r.late]
    minutes = Counter((r.event_time_ms // SLIDE_MS * SLIDE_MS, topic) for r in on_time for topic in r.topics)
    trending: Counter[tuple[int, str]] = Counter()
    for (start, topic), n in minutes.items():
        for back in range(TRENDING_MS // SLIDE_MS):   # the windows that hold this minute
            trending[(start - back * SLIDE_MS, topic)] += n
    late = sum(r.late for r in delivered)
    return live_views(delivered) | {
        "topic_minute": {f"topic_minute/{start}/{topic}": n for (start, topic), n in minutes.items()},
        "trending": {f"trending/{start}/{topic}": n for (start, topic), n in trending.items()},
        "totals": {"totals/input": len(delivered) + dead, "totals/valid": len(delivered),
                   "totals/dlq": dead, "totals/late": late},
        "members_all": {"members_all": len({r.member_id for r in delivered})},
    }


def dead_letters(lines: Sequence[Line], dead: dict[tuple[int, int], str],
                 dlq: Sequence[Message]) -> list[tuple[int, str, str]]:
    """The dead-letter topic as (Kafka timestamp ms, reason code, source kind), after checking it
    holds exactly the collector's rejects (known by value) and the job's (by source position)."""
    wanted = Counter[tuple[Any, str]](((COLLECTED, line.value), line.rejected)
                                      for line in lines if line.rejected)
    wanted.update(((STREAM, position), code) for position, code in dead.items())
    found, kinds = Counter[tuple[Any, str]](), []
    for message in dlq:
        code = message.headers["kappa.reason"].split(":", 1)[0]
        if "kappa.source_partition" in message.headers:
            identity: tuple[str, Any] = (STREAM, (int(message.headers["kappa.source_partition"]),
                                                  int(message.headers["kappa.source_offset"])))
        else:
            identity = (COLLECTED, message.value)
        found[(identity, code)] += 1
        kinds.append((message.timestamp_ms, code, identity[0]))
    assert found == wanted, (sorted(found - wanted, key=str)[:5], sorted(wanted - found, key=str)[:5])
    return kinds
