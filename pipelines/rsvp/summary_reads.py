"""The reads of what an RSVP apply changed, as summary records (pipelines/rsvp/redis_views.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jobs.streaming.redis_script import Reads

if TYPE_CHECKING:
    from jobs.streaming.redis_sink import Keys
    from pipelines.rsvp.redis_views import Applied

HLL_ERROR = 0.0081


class SummaryReads:
    """The reads of what an apply changed, and their replies as summary records (the summaries topic).

    The same reads go in the apply's last transaction (``RedisSummarySink.apply_and_read``)
    or, publishing a recovered batch again, alone (``RedisSummarySink.read_back``): both
    answer them in RESP2's shapes (lists of strings, None for a missing field).
    """

    def __init__(self, keys: Keys, applied: Applied, windows_ms: Mapping[str, int], top_n: int) -> None:
        self.windows_ms = windows_ms
        self.cities = sorted(applied.cities)
        self.trending = sorted(applied.trending)
        self.members = sorted(applied.members)
        self.events = applied.events
        self.topics = applied.topics
        top = str(top_n - 1)
        self.reads = Reads([
            *(["HGET", keys("cities", start), city] for start, city in self.cities),
            *(["ZREVRANGE", keys("trending", start), "0", top, "WITHSCORES"] for start in self.trending),
            *(["PFCOUNT", keys("members", start)] for start in self.members),
            *([["ZREVRANGE", keys("topics", "all"), "0", top, "WITHSCORES"]] if self.topics else [])],
            self.events, applied.entity)

    def records(self, replies: Sequence[Any]) -> list[dict[str, Any]]:
        """The summary records of the replies to :attr:`commands`."""
        results, windows_ms = iter(replies), self.windows_ms
        out: list[dict[str, Any]] = []
        for start, city in self.cities:
            out.append(_window("city_window", f"city_window/{start}/{city}", start, windows_ms["city"])
                       | {"city": city, "count": int(next(results) or 0)})
        for start in self.trending:
            out.append(_window("trending", f"trending/{start}", start, windows_ms["trending"])
                       | {"items": _items(next(results))})
        for start in self.members:
            out.append(_window("members_window", f"members_window/{start}", start, windows_ms["members"])
                       | {"approx_distinct": int(next(results)), "error": HLL_ERROR})
        topics = [{"kind": "top_topics", "key": "top_topics", "items": _items(next(results))}
                  for _ in range(self.topics)]
        for event_id in self.events.to_pylist():   # the events' reads come last (Reads)
            yes, no, guests, name = next(results) or (None,) * 4
            out.append({"kind": "event", "key": f"event/{event_id}", "event_id": event_id,
                        "event_name": name, "yes": int(yes or 0), "no": int(no or 0),
                        "guests": int(guests or 0)})
        return out + topics


def _window(kind: str, key: str, start: int, size_ms: int) -> dict[str, Any]:
    return {"kind": kind, "key": key, "window_start_ms": start, "window_end_ms": start + size_ms}


def _items(flat: Sequence[str] | None) -> list[dict[str, Any]]:
    """``ZREVRANGE ... WITHSCORES`` as Redis answers it: item, score, item, score, ..."""
    flat = flat or []
    return [{"item": flat[i], "count": int(float(flat[i + 1])), "error": 0} for i in range(0, len(flat), 2)]
