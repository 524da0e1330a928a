"""The RSVP live views as they are when read: Redis (docs/streaming.md "Redis keys") and gold.rsvp_summaries.

Both are read into the shape of jobs/batch/reconcile.py ``Views``: kind -> key -> value, with
the keys of ``rsvps.summaries`` (``city_window/<start>/<city>``, ``members_window/<start>``,
``event/<event_id>`` -> ``[yes, no, guests]``, ``topic/<name>``) and ``topic_minute/<start>/<topic>``,
``trending/<start>/<topic>``, ``totals/<name>``, ``members_all``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from jobs.batch.reconcile import Views

if TYPE_CHECKING:
    from jobs.config.load import KappaConfig

SCAN_COUNT = 1000
TOTALS = ("input", "valid", "dlq", "late")


def redis_views(cfg: KappaConfig, lake: Views, span: tuple[int, int] | None) -> Views:
    """The Redis views: windows, events, all-time topics, totals and distinct members.

    Every window in ``span`` that its index or the lake names, every event hash.
    """
    import redis

    prefix = cfg.streaming.redis_prefix
    client: Any = redis.Redis(**cfg.redis.client_kwargs())
    try:
        views: Views = {"city_window": {}, "members_window": {}, "event": {}, "topic": {}}
        for begin in _starts(client, f"{prefix}:cities:windows", span, lake.get("city_window", {})):
            for city, value in client.hgetall(f"{prefix}:cities:{begin}").items():
                views["city_window"][f"city_window/{begin}/{city.decode()}"] = int(value)
        for begin in _starts(client, f"{prefix}:members:windows", span, lake.get("members_window", {})):
            count = client.pfcount(f"{prefix}:members:{begin}")
            views["members_window"][f"members_window/{begin}"] = int(count)
        for kind, name in (("topic_minute", "topics:minute"), ("trending", "trending")):
            starts = _starts(client, f"{prefix}:{name}:windows", span, lake.get(kind, {}))
            views[kind] = _sorted_sets(client, [f"{prefix}:{name}:{begin}" for begin in starts], kind, starts)
        events = {key.decode().rsplit(":", 1)[1]
                  for key in client.scan_iter(match=f"{prefix}:event:*", count=SCAN_COUNT)}
        events |= {key.split("/", 1)[1] for key in lake.get("event", {})}
        for event_id in sorted(events):
            fields = client.hgetall(f"{prefix}:event:{event_id}")
            if fields:
                views["event"][f"event/{event_id}"] = [int(fields.get(name.encode(), 0))
                                                       for name in ("yes", "no", "guests")]
        for topic, score in client.zrange(f"{prefix}:topics:all", 0, -1, withscores=True):
            views["topic"][f"topic/{topic.decode()}"] = int(score)
        totals = client.hgetall(f"{prefix}:totals")
        views["totals"] = {f"totals/{name}": int(totals.get(name.encode(), 0)) for name in TOTALS}
        views["members_all"] = {"members_all": int(client.pfcount(f"{prefix}:members:all"))}
        return views
    finally:
        client.close()


def _starts(client: Any, index: str, span: tuple[int, int] | None, lake_keys: Iterable[str]) -> list[int]:
    """The window starts of ``index`` in ``span``, and those of the lake's keys (``<kind>/<start>...``).

    The lake's are read too: an index keeps its latest windows only (trimmed), and a window the
    lake has must be found in Redis or reported missing.
    """
    low, high = span if span is not None else ("-inf", "+inf")
    starts = {int(start) for start in client.zrangebyscore(index, low, high)}
    starts |= {int(key.split("/")[1]) for key in lake_keys}
    return sorted(start for start in starts if span is None or start < span[1])


def _sorted_sets(client: Any, keys: list[str], kind: str, starts: list[int]) -> dict[str, int]:
    """Every member of the sorted sets ``keys`` (one per start) as ``<kind>/<start>/<member>``."""
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.zrange(key, 0, -1, withscores=True)
        replies = pipe.execute()
    return {f"{kind}/{start}/{member.decode()}": int(score)
            for start, pairs in zip(starts, replies, strict=True) for member, score in pairs}


def gold_views(cfg: KappaConfig, span: tuple[int, int] | None) -> Views | None:
    """The summaries' latest values as loaded into gold.rsvp_summaries.

    City windows, members windows and events as keys; the trending windows' and all-time top-N
    lists as the counts of their listed items (``trending/<start>/<topic>``, ``topic/<name>``).
    None when the table does not exist (nothing loaded it yet).
    """
    from jobs.lake.delta import open_delta, table_uri
    from jobs.lake.storage import storage_options

    table = open_delta(table_uri(cfg.lake.root, "gold.rsvp_summaries"), storage_options(cfg.lake))
    if table is None:
        return None
    views: Views = {"city_window": {}, "members_window": {}, "event": {}, "trending": {}, "topic": {}}
    for row in table.to_pyarrow_table().to_pylist():
        start = row.get("window_start_ms")
        if start is not None and span is not None and not span[0] <= start < span[1]:
            continue
        kind = row["kind"]
        if kind == "city_window":
            views["city_window"][f"city_window/{start}/{row['city']}"] = row["count"]
        elif kind == "members_window":
            views["members_window"][f"members_window/{start}"] = row["approx_distinct"]
        elif kind == "event":
            views["event"][f"event/{row['event_id']}"] = [row["yes"], row["no"], row["guests"]]
        elif kind == "trending":
            views["trending"] |= {f"trending/{start}/{item['item']}": item["count"]
                                  for item in row["items"] or []}
        elif kind == "top_topics":
            views["topic"] |= {f"topic/{item['item']}": item["count"] for item in row["items"] or []}
    return views
