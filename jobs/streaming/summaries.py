"""Read the live summaries from Redis (``kappa summaries ...``; key scheme in docs/streaming.md)."""

from __future__ import annotations

from typing import Any

from jobs.common.config import KappaConfig
from jobs.common.errors import KappaError
from jobs.streaming.redis_sink import Keys, connect
from jobs.streaming.summary_reads import HLL_ERROR


def _latest_windows(client: Any, keys: Keys, name: str, count: int) -> list[int]:
    starts = client.zrevrange(keys(name, "windows"), 0, count * 4 - 1)
    alive = [int(s) for s in starts if client.exists(keys(name, s))]
    return alive[:count]


def _client(cfg: KappaConfig) -> Any:
    return connect(cfg)


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
    size = cfg.streaming.trending_window_s * 1000
    try:
        out = []
        for start in _latest_windows(client, keys, "trending", windows):
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
    size = cfg.streaming.city_window_s * 1000
    try:
        out = []
        for start in _latest_windows(client, keys, "cities", windows):
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


def query_states(cfg: KappaConfig) -> dict[str, dict[str, Any]]:
    """The state record of every query that wrote one (jobs/streaming/watch.py), by query."""
    keys, client = Keys(cfg.streaming.redis_prefix), _client(cfg)
    try:
        names = sorted(client.scan_iter(keys("metrics", "*", "status")))
        return {name.removeprefix(keys("metrics", "")).removesuffix(":status"): client.hgetall(name)
                for name in names}
    finally:
        client.close()


def query_metrics(cfg: KappaConfig) -> list[dict[str, Any]]:
    """The last batch metrics of every query that wrote to this Redis."""
    keys, client = Keys(cfg.streaming.redis_prefix), _client(cfg)
    try:
        names = sorted(k for k in client.scan_iter(keys("metrics", "*"))
                       if not k.endswith((":history", ":status")))
        return [client.hgetall(name) for name in names]
    finally:
        client.close()


class ViewLostError(KappaError):
    """The view's Redis data is gone (docs/runbooks/redis-lost.md): nothing of it is shown as current."""


def view_lost(cfg: KappaConfig) -> bool:
    """Whether the view's Redis data is gone: its live query committed batches, its fence is missing.

    The live query's checkpoint (``streaming.query_name`` under ``lake.checkpoint_root``) records
    committed batches (:func:`~jobs.streaming.state.effects_gone`): without the fence hash, Redis
    lost the view (a restart without persistence, a failover, a ``FLUSHALL``).
    """
    from jobs.streaming.state import checkpoint_path, effects_gone

    checkpoint = checkpoint_path(str(cfg.lake.checkpoint_root), cfg.streaming.query_name)
    client = _client(cfg)
    try:
        return effects_gone(checkpoint, bool(client.exists(Keys(cfg.streaming.redis_prefix).fence)))
    finally:
        client.close()


def check_view_kept(cfg: KappaConfig) -> None:
    """Raise ViewLostError when the view's Redis data is gone (:func:`view_lost`)."""
    if view_lost(cfg):
        raise ViewLostError(
            f"the view's data is gone from Redis: its fence {Keys(cfg.streaming.redis_prefix).fence} is "
            f"missing while query {cfg.streaming.query_name} has committed batches (a Redis restart "
            "without persistence, a failover or a FLUSHALL); rebuild it from the log with "
            "`kappa reprocess start` (docs/runbooks/redis-lost.md)")
