"""The live views as they are now: Redis (docs/streaming.md "Redis keys") and gold.rsvp_summaries.

Both are read into the shape of jobs/batch/reconcile.py ``Views``: kind -> key -> value, with
the keys of ``rsvps.summaries`` (``city_window/<start>/<city>``, ``members_window/<start>``,
``event/<event_id>`` -> ``[yes, no, guests]``, ``topic/<name>``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.common.config import KappaConfig

Views = dict[str, dict[str, Any]]
SCAN_COUNT = 1000


def redis_views(cfg: KappaConfig, lake: Views, span: tuple[int, int] | None) -> Views:
    """The Redis views: every indexed window in ``span``, every event hash, all-time topics."""
    import redis

    prefix = cfg.streaming.redis_prefix
    low, high = span if span is not None else ("-inf", "+inf")
    client: Any = redis.Redis(**cfg.redis.client_kwargs())
    try:
        views: Views = {"city_window": {}, "members_window": {}, "event": {}, "topic": {}}
        for start in client.zrangebyscore(f"{prefix}:cities:windows", low, high):
            begin = int(start)
            if span is not None and begin >= span[1]:
                continue
            for city, value in client.hgetall(f"{prefix}:cities:{begin}").items():
                views["city_window"][f"city_window/{begin}/{city.decode()}"] = int(value)
        starts = {int(s) for s in client.zrangebyscore(f"{prefix}:members:windows", low, high)}
        starts |= {int(key.split("/")[1]) for key in lake.get("members_window", {})}
        for begin in sorted(starts):
            if span is None or begin < span[1]:
                count = client.pfcount(f"{prefix}:members:{begin}")
                views["members_window"][f"members_window/{begin}"] = int(count)
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
        return views
    finally:
        client.close()


def gold_views(cfg: KappaConfig, span: tuple[int, int] | None) -> Views | None:
    """The summaries' latest values as loaded into gold.rsvp_summaries.

    City windows, members windows and events; the top-N topic lists hold only the top items,
    so they are not compared. None when the table does not exist (nothing loaded it yet).
    """
    from jobs.common.delta import open_delta, table_uri

    table = open_delta(table_uri(cfg.lake.root, "gold.rsvp_summaries"))
    if table is None:
        return None
    views: Views = {"city_window": {}, "members_window": {}, "event": {}}
    for row in table.to_pyarrow_table().to_pylist():
        start = row.get("window_start_ms")
        if start is not None and span is not None and not span[0] <= start < span[1]:
            continue
        if row["kind"] == "city_window":
            views["city_window"][f"city_window/{start}/{row['city']}"] = row["count"]
        elif row["kind"] == "members_window":
            views["members_window"][f"members_window/{start}"] = row["approx_distinct"]
        elif row["kind"] == "event":
            views["event"][f"event/{row['event_id']}"] = [row["yes"], row["no"], row["guests"]]
    return views
