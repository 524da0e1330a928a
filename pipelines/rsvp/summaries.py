"""``kappa summaries VIEW``: the RSVP live views read from Redis (key scheme: pipelines/rsvp/redis_views.py).

The file ``summaries:`` names in pipeline.yaml: :func:`read` answers one view, as data (``--json``)
and as lines of text.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from jobs.config.load import KappaConfig
from jobs.errors import KappaError
from jobs.streaming.redis_sink import Keys, connect
from jobs.streaming.summaries import latest_windows
from pipelines.rsvp.aggregates import windows_from
from pipelines.rsvp.summary_reads import HLL_ERROR


def top_topics(cfg: KappaConfig, n: int | None = None) -> list[dict[str, Any]]:
    """All-time top-N topics: ``[{"item", "count", "error"}]`` (exact: error 0)."""
    keys, client = Keys(cfg.streaming.redis_prefix), _client(cfg)
    try:
        pairs = client.zrevrange(keys("topics", "all"), 0, (n or cfg.streaming.top_n) - 1, withscores=True)
        return [{"item": item, "count": int(score), "error": 0} for item, score in pairs]
    finally:
        client.close()


def trending(cfg: KappaConfig, windows: int = 1, n: int | None = None) -> list[dict[str, Any]]:
    """Top-N topics of the latest sliding windows, newest first."""
    keys, client = Keys(cfg.streaming.redis_prefix), _client(cfg)
    size = windows_from(cfg).trending_ms
    try:
        out = []
        for start in latest_windows(client, keys, "trending", windows):
            pairs = client.zrevrange(keys("trending", start), 0, (n or cfg.streaming.top_n) - 1,
                                     withscores=True)
            out.append({"window_start_ms": start, "window_end_ms": start + size,
                        "items": [{"item": i, "count": int(c), "error": 0} for i, c in pairs]})
        return out
    finally:
        client.close()


def cities(cfg: KappaConfig, windows: int = 1, n: int | None = None) -> list[dict[str, Any]]:
    """RSVPs per city in the latest tumbling windows, newest first, cities by count."""
    keys, client = Keys(cfg.streaming.redis_prefix), _client(cfg)
    size = windows_from(cfg).city_ms
    try:
        out = []
        for start in latest_windows(client, keys, "cities", windows):
            counts = {city: int(c) for city, c in client.hgetall(keys("cities", start)).items()}
            ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: n or None]
            members = client.pfcount(keys("members", start))
            out.append({"window_start_ms": start, "window_end_ms": start + size,
                        "cities": [{"city": c, "count": k} for c, k in ranked],
                        "total": sum(counts.values()), "approx_distinct_members": members,
                        "members_error": HLL_ERROR})
        return out
    finally:
        client.close()


def event(cfg: KappaConfig, event_id: str) -> dict[str, Any] | None:
    """Yes/no responses and guests of one event (None when unknown or expired)."""
    keys, client = Keys(cfg.streaming.redis_prefix), _client(cfg)
    try:
        values = client.hgetall(keys("event", event_id))
        if not values:
            return None
        return {"event_id": event_id, "event_name": values.get("event_name"),
                **{name: int(values.get(name, 0)) for name in ("yes", "no", "guests")}}
    finally:
        client.close()


Answer = tuple[Any, list[str]]


def _client(cfg: KappaConfig) -> Any:
    return connect(cfg)


def _top_topics(cfg: KappaConfig, key: str | None, windows: int, n: int | None) -> Answer:
    items = top_topics(cfg, n)
    return items, [f"{i['count']:>8}  {i['item']}" for i in items]


def _trending(cfg: KappaConfig, key: str | None, windows: int, n: int | None) -> Answer:
    data = trending(cfg, windows, n)
    return data, [line for w in data for line in
                  [f"window {_iso(w['window_start_ms'])} .. {_iso(w['window_end_ms'])}"]
                  + [f"{i['count']:>8}  {i['item']}" for i in w["items"]]]


def _cities(cfg: KappaConfig, key: str | None, windows: int, n: int | None) -> Answer:
    data = cities(cfg, windows, n)
    return data, [line for w in data for line in
                  [f"window {_iso(w['window_start_ms'])}: {w['total']} RSVPs, "
                   f"~{w['approx_distinct_members']} members (±{w['members_error']:.2%})"]
                  + [f"{c['count']:>8}  {c['city']}" for c in w["cities"]]]


def _event(cfg: KappaConfig, key: str | None, windows: int, n: int | None) -> Answer:
    if not key:
        raise KappaError("`kappa summaries event` needs the event id: kappa summaries event EVENT_ID")
    data = event(cfg, key)
    if data is None:
        raise KappaError(f"no summary for event {key!r} (unknown, or expired after "
                         "streaming.params.event_ttl_s)")
    return data, [f"{data['event_name']} ({key}): yes {data['yes']}, no {data['no']}, "
                  f"guests {data['guests']}"]


VIEWS: dict[str, tuple[Callable[[KappaConfig, str | None, int, int | None], Answer], str]] = {
    "top-topics": (_top_topics, "all-time top topics (exact counts; -n how many)"),
    "trending": (_trending, "top topics of the latest sliding windows (--windows)"),
    "cities": (_cities, "RSVPs per city in the latest 1-minute windows, with approximate distinct "
                        "members (--windows, -n cities per window)"),
    "event": (_event, "yes/no responses and guests of one event (KEY: the event id)"),
}


def read(cfg: KappaConfig, view: str | None, key: str | None, windows: int, n: int | None) -> Answer:
    """One view as (data, text lines); ``view`` None: the views this file reads, one per line."""
    if view is None:
        return ({name: text for name, (_, text) in VIEWS.items()},
                [f"{name:<12} {text}" for name, (_, text) in VIEWS.items()])
    found = VIEWS.get(view)
    if found is None:
        raise KappaError(f"no view {view!r} in `kappa summaries`; choose one of: {', '.join(VIEWS)}")
    return found[0](cfg, key, windows, n)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")
