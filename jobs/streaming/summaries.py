"""What every ``kappa stream`` pipeline keeps in Redis besides its views: query states, metrics, the fence.

A pipeline's own views are read by its ``summaries:`` file (``kappa summaries VIEW``, :func:`read`).
"""

from __future__ import annotations

from typing import Any

from jobs.config.load import KappaConfig
from jobs.errors import KappaError
from jobs.streaming.redis_sink import Keys, connect


def _client(cfg: KappaConfig) -> Any:
    return connect(cfg)


def latest_windows(client: Any, keys: Keys, name: str, count: int) -> list[int]:
    """The starts of the latest ``count`` windows of the view ``name`` still in Redis, newest first.

    Read from the view's index of windows, ``<name>:windows``
    (:func:`~jobs.streaming.redis_sink.index_windows`).
    """
    starts = client.zrevrange(keys(name, "windows"), 0, count * 4 - 1)
    alive = [int(s) for s in starts if client.exists(keys(name, s))]
    return alive[:count]


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
