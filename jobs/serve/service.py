"""The running service: config, shared feeds, hub, Redis client, resume pool, metrics."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import redis.asyncio as aioredis
from pydantic import SecretStr

from jobs.config.load import KappaConfig
from jobs.errors import ConfigError
from jobs.serve.hub import Hub
from jobs.serve.kafka_io import SharedFeed
from jobs.serve.metrics import ServeMetrics
from jobs.serve.records import STREAMS, Record, Status, StreamShape
from jobs.views.versions import BUILDING, Views, ViewsWatcher, version_config

logger = logging.getLogger(__name__)
VIEWS_POLL_S = 1.0


def auth_token(cfg: KappaConfig, environ: dict[str, str] | None = None) -> SecretStr | None:
    """The bearer token: the environment's, else the secret store's; None (auth off) if neither."""
    environ = dict(os.environ) if environ is None else environ
    value = environ.get(cfg.serve.auth_token_env, "").strip()
    if value:
        return SecretStr(value)
    if cfg.serve.auth_token is not None:
        return cfg.serve.auth_token
    if cfg.serve.require_auth:
        raise ConfigError(f"serve.require_auth is true but {cfg.serve.auth_token_env} is not set; "
                          f"export {cfg.serve.auth_token_env}=<token>, set serve.auth_token_secret_arn "
                          "(secrets.provider: aws) or set serve.require_auth: false")
    return None


def check_limits(cfg: KappaConfig) -> None:
    """Fail at start on limits that would disconnect every client (one poll exceeds a buffer)."""
    serve = cfg.serve
    if serve.client_buffer < 2 * serve.consumer_batch:
        raise ConfigError(f"serve.client_buffer ({serve.client_buffer}) must be at least twice "
                          f"serve.consumer_batch ({serve.consumer_batch}): one poll of each shared "
                          "consumer reaches a client's buffer at once")


def stream_topics(cfg: KappaConfig) -> dict[str, str]:
    """Topic of each stream: serve.*_topic, else the streaming job's output topics."""
    return {"analyzed": cfg.serve.analyzed_topic or cfg.streaming.analyzed_topic,
            "summaries": cfg.serve.summaries_topic or cfg.streaming.summaries_topic}


@dataclass
class Service:
    """Everything the endpoints share; started and stopped by the app's lifespan."""

    cfg: KappaConfig
    token: SecretStr | None
    shape: StreamShape
    """The followed pipeline's SSE event and filter dimensions (its ``serve.filters``)."""
    metrics: ServeMetrics = field(default_factory=ServeMetrics)
    topics: dict[str, str] = field(default_factory=dict)
    feeds: dict[str, SharedFeed] = field(default_factory=dict)
    hub: Hub | None = None
    redis: Any = None
    pool: ThreadPoolExecutor | None = None
    prefix: str = "kappa"
    version: int = 1
    """The view version served (docs/reprocess.md): its Redis prefix and topics."""
    watcher: ViewsWatcher | None = None
    rebuilding: str | None = None
    """Set while the served version has no data in Redis and another version is being built."""
    building: tuple[int, ...] = ()
    start_error: Exception | None = None
    """Why :meth:`start` failed (the app's lifespan keeps it and stops the server)."""
    on_start_failed: Callable[[], None] | None = None
    """Called when :meth:`start` failed: the runner stops its server (None: nothing to stop)."""
    _watch: asyncio.Task | None = None
    _redis_watch: asyncio.Task | None = None
    _fenced: dict[int, bool] = field(default_factory=dict)
    """Versions whose fence this process has seen: one that disappears is a lost view."""
    _generation: int = 0

    @property
    def kafka(self) -> dict[str, Any]:
        """Client properties of every Kafka consumer the service makes."""
        return self.cfg.kafka.client_config()

    def running_hub(self) -> Hub:
        """The hub (the service must be started)."""
        if self.hub is None:
            raise RuntimeError("the service is not started")
        return self.hub

    async def start(self) -> None:
        """Connect Redis, start one shared consumer per stream, build the hub."""
        loop = asyncio.get_running_loop()
        serve = self.cfg.serve
        check_limits(self.cfg)
        self.watcher = ViewsWatcher(self.cfg)
        views = await asyncio.to_thread(self.watcher.poll)
        self.version = views.current if views is not None else 1
        self.building = _building(views)
        view = version_config(self.cfg, self.version)
        self.topics = stream_topics(view)
        self.prefix = view.streaming.redis_prefix
        self.redis = aioredis.Redis(**self.cfg.redis.client_kwargs(), decode_responses=True,
                                    socket_timeout=5, socket_connect_timeout=5)
        self.pool = ThreadPoolExecutor(serve.catchup_workers, thread_name_prefix="serve-resume")
        await self._start_feeds(loop)
        self.hub = Hub({s: list(f.start_offsets) for s, f in self.feeds.items()},
                       serve.ring_buffer_size, on_overflow=self.metrics.overflows.inc, version=self.version)
        for feed in self.feeds.values():
            feed.start()
        self._watch = asyncio.create_task(self._follow_views())
        self._redis_watch = asyncio.create_task(self._watch_redis())
        logger.info("serve started version=%d topics=%s position=%s", self.version, self.topics,
                    self.hub.state()["position"])

    async def _start_feeds(self, loop: asyncio.AbstractEventLoop,
                           after: dict[tuple[str, int], int] | None = None) -> None:
        """One shared consumer per stream of the served version (not started yet).

        ``after`` (a switch): the analyzed feed starts where those source positions end.
        """
        serve = self.cfg.serve

        self._generation += 1  # what the feeds of a previous version still deliver is dropped
        generation = self._generation

        def deliver(records: list[Record]) -> None:
            loop.call_soon_threadsafe(self._publish, records, generation)

        def on_gap(stream: str, partition: int, low: int) -> None:
            loop.call_soon_threadsafe(self._skip, stream, partition, low, generation)

        for stream in STREAMS:
            self.feeds[stream] = await loop.run_in_executor(
                self.pool, partial(SharedFeed, on_gap=on_gap, after=after if stream == "analyzed" else None,
                                   shape=self.shape),
                stream, self.topics[stream], self.kafka,
                serve.consumer_batch, deliver)

    async def _follow_views(self) -> None:
        """Every VIEWS_POLL_S: when another version became current, switch to it."""
        assert self.watcher is not None
        while True:
            await asyncio.sleep(VIEWS_POLL_S)
            try:
                views = await asyncio.to_thread(self.watcher.poll)
                if views is not None:
                    self.building = _building(views)
                if views is not None and views.current != self.version:
                    await self._switch(views.current)
            except asyncio.CancelledError:
                raise
            except Exception:  # a failed poll or switch is retried at the next one
                logger.exception("serve: following the view pointer failed; retrying")

    async def _watch_redis(self) -> None:
        """Every VIEWS_POLL_S: is the served view's Redis data still there (apart from the pointer)."""
        while True:
            try:
                await self._check_rebuilding()
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis down: the health check says so; retried at the next one
                logger.exception("serve: checking the served view in Redis failed; retrying")
            await asyncio.sleep(VIEWS_POLL_S)

    async def _check_rebuilding(self) -> None:
        """503 text while the served view's Redis data is gone (no fence where there was one).

        ``rebuilding`` while another version is being built; ``view lost`` before that, when the
        view had data: its fence was seen by this process, or its live query committed batches.
        """
        fence = f"{self.prefix}:fence:summaries"
        if await self.redis.exists(fence):
            self._fenced[self.version] = True
            self.rebuilding = None
            return
        if self.building:
            self.rebuilding = (
                f"rebuilding: view version {self.version} has no data in Redis (lost?) and version(s) "
                f"{', '.join(map(str, self.building))} are being rebuilt from the log; the summaries "
                "come back when one is promoted (docs/runbooks/redis-lost.md); retry later")
        elif self._fenced.get(self.version) or await asyncio.to_thread(self._applied_before):
            self.rebuilding = (
                f"view lost: view version {self.version}'s data is gone from Redis (its fence {fence} "
                "is missing: a Redis restart without persistence, a failover or a FLUSHALL); rebuild "
                "it from the log with `kappa reprocess start` (docs/runbooks/redis-lost.md)")
        else:
            self.rebuilding = None

    def _applied_before(self) -> bool:
        """Whether the served version's live query committed batches (its checkpoint has some)."""
        from jobs.streaming.state import checkpoint_path, last_offsets

        view = version_config(self.cfg, self.version)
        checkpoint = checkpoint_path(str(view.lake.checkpoint_root), view.streaming.query_name)
        return last_offsets(checkpoint) is not None

    async def _switch(self, version: int) -> None:
        """Serve ``version``: its Redis prefix and topics; every client told, none disconnected."""
        loop, previous = asyncio.get_running_loop(), self.version
        for feed in self.feeds.values():
            await asyncio.to_thread(feed.stop)
        view = version_config(self.cfg, version)
        self.topics, self.prefix, self.version = stream_topics(view), view.streaming.redis_prefix, version
        await self._start_feeds(loop, after=dict(self.running_hub().delivered))
        self.running_hub().switch({s: list(f.start_offsets) for s, f in self.feeds.items()}, version,
                                  Status("view_switched", {
                                      "version": version, "previous": previous, "topics": self.topics,
                                      "detail": f"view version {version} is current (was {previous}): "
                                                "events from here on are its records; ids of the "
                                                "previous version no longer resume"}))
        for feed in self.feeds.values():
            feed.start()
        logger.info("serve switched view version=%d previous=%d topics=%s", version, previous, self.topics)

    def _publish(self, records: list[Record], generation: int) -> None:
        if generation != self._generation:
            return
        hub = self.running_hub()
        hub.publish(records)
        self.metrics.received.labels(records[0].stream).inc(len(records))

    def _skip(self, stream: str, partition: int, low: int, generation: int) -> None:
        if generation != self._generation:
            return
        if self.running_hub().skip(stream, partition, low) is not None:
            self.metrics.not_retained.inc()

    async def stop(self) -> None:
        """Stop the consumers, the resume pool and the Redis client."""
        for watch in (self._watch, self._redis_watch):
            if watch is not None:
                watch.cancel()
        if self.watcher is not None:
            await asyncio.to_thread(self.watcher.close)
        for feed in self.feeds.values():
            await asyncio.to_thread(feed.stop)
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
        if self.redis is not None:
            await self.redis.aclose()
        logger.info("serve stopped")

    def lag(self) -> dict[str, int]:
        """High watermark (as last fetched by each consumer) minus the hub's position, per stream."""
        hub = self.running_hub()
        return {stream: sum(max(0, high - offset) for high, offset
                            in zip(feed.highs, hub.position[stream], strict=False) if high >= 0)
                for stream, feed in self.feeds.items()}


def _building(views: Views | None) -> tuple[int, ...]:
    if views is None:
        return ()
    return tuple(sorted(v for v, info in views.versions.items() if info.get("state") == BUILDING))
