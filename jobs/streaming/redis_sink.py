"""The Redis sink of the live summaries: fenced increments, exactly-once in effect.

The fence: docs/streaming.md ("The fence"). A batch's increments and the new fence go to Redis as
fenced transactions (jobs/streaming/redis_script.py) that check the fence first: each chunk
applied entirely or not at all, and never twice for the same offsets. Which keys an increment
writes, and what is read back, is the pipeline's key scheme (its codec's ``views``,
:class:`jobs.streaming.codec.RedisViews`).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc
import redis

from jobs.config.load import KappaConfig
from jobs.streaming.aggregates import IncrementRows, increments_table
from jobs.streaming.fence_fields import parse_fence, parse_stream_points
from jobs.streaming.members import pfadd_fenced
from jobs.streaming.redis_script import (
    SCRIPT_CHUNK,
    ApplyOps,
    FencedApply,
    Partition,
    Reads,
    SummarySinkError,
)

if TYPE_CHECKING:
    from jobs.streaming.codec import Changed

logger = logging.getLogger(__name__)

FENCE_SCOPE = "summaries"
HISTORY = 100
MAX_INDEXED_WINDOWS = 10_000


def index_windows(op: ApplyOps, keys: Keys, windows: Mapping[str, set[int]], ttl: int) -> None:
    """Expire the windows written (``<name>:<start>``) and add them to their view's index of windows.

    The index, ``<name>:windows``, is a sorted set of window starts (the latest
    :data:`MAX_INDEXED_WINDOWS` kept): what readers look up to find the latest windows.
    """
    for name, starts in windows.items():
        if not starts:  # e.g. no on-time items in the batch: ZADD refuses an empty mapping
            continue
        for start in starts:
            op("EXPIRE", keys(name, start), ttl)
        ordered = sorted(starts)
        for i in range(0, len(ordered), SCRIPT_CHUNK):  # one command stays small
            op("ZADD", keys(name, "windows"), *(x for s in ordered[i:i + SCRIPT_CHUNK] for x in (s, s)))
        op("ZREMRANGEBYRANK", keys(name, "windows"), 0, -MAX_INDEXED_WINDOWS - 1)

class Keys:
    """Redis key names under one prefix."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __call__(self, *parts: object) -> str:
        """``<prefix>:<part>:<part>...``."""
        return ":".join([self.prefix, *(str(part) for part in parts)])

    @property
    def fence(self) -> str:
        """The fence hash of the summaries."""
        return self("fence", FENCE_SCOPE)


def connect(cfg: KappaConfig) -> redis.Redis:
    """A client of the configured Redis (decoded strings)."""
    return redis.Redis(**cfg.redis.client_kwargs(), decode_responses=True, socket_timeout=30)


class RedisSummarySink:
    """``setup`` / ``fence`` / ``apply`` / ``read_back`` of the summaries in Redis."""

    def __init__(self, cfg: KappaConfig) -> None:
        from jobs.streaming.codec import stream_codec

        self.cfg = cfg
        self.keys = Keys(cfg.streaming.redis_prefix)
        self.views = stream_codec().views(cfg, self.keys)
        self.client = connect(cfg)
        self._apply = FencedApply(self.client, self.keys.fence, cfg.streaming.apply_chunk_args)

    def setup(self) -> None:
        """Fail fast when Redis cannot be reached."""
        try:
            self.client.ping()
        except redis.RedisError as exc:
            raise SummarySinkError(
                f"Redis at {self.cfg.redis.host}:{self.cfg.redis.port} is not reachable ({exc}); "
                "start it (`kappa stack up`) or fix redis.* in conf/") from exc

    def fence(self) -> dict[Partition, int]:
        """The next offset to apply per topic-partition (absent: nothing applied yet)."""
        return parse_fence(self.client.hgetall(self.keys.fence))

    def stream_points(self) -> dict[Partition, dict[int, int | None]]:
        """The stream time at each partition's fence (jobs/streaming/stream_time.py)."""
        return parse_stream_points(self.client.hgetall(self.keys.fence))

    def apply(self, increments: IncrementRows, expected: Mapping[Partition, int],
              new_fence: Mapping[Partition, int], meta: Mapping[str, Any]) -> Changed:
        """Apply a batch's increments and move the fence, atomically; raise FenceMoved on a race."""
        applied, ops = self._prepare(increments, meta)
        self._run(ops, expected, new_fence, meta)
        return applied

    def apply_and_read(self, increments: IncrementRows, expected: Mapping[Partition, int],
                       new_fence: Mapping[Partition, int], meta: Mapping[str, Any], *,
                       windows_ms: Mapping[str, int], top_n: int) -> list[dict[str, Any]]:
        """:meth:`apply`, and the absolute values of what it changed as summary records (the summaries topic).

        The reads go in the last transaction of the writes, after them (up to 5,000; more as one
        pipeline after it), as RESP bytes whose replies hiredis parses in bulk: through redis-py,
        a command per changed key took about 0.4 s of the driver's CPU per 300k replay
        (docs/explanation/streaming-performance.md).
        """
        applied, ops = self._prepare(increments, meta)
        reads = applied.reads(dict(windows_ms), top_n)
        return applied.records(self._run(ops, expected, new_fence, meta, reads))

    def _prepare(self, increments: IncrementRows, meta: Mapping[str, Any]) -> tuple[Changed, ApplyOps]:
        """A batch's writes as script operations, and what they change."""
        ops = self._ops()
        applied = self._increments(ops, increments)
        for name, value in meta.get("totals", {}).items():
            if value:
                ops("HINCRBY", self.keys("totals"), name, int(value))
        return applied, ops

    def _run(self, ops: ApplyOps, expected: Mapping[Partition, int], new_fence: Mapping[Partition, int],
             meta: Mapping[str, Any], reads: Reads | None = None) -> list[Any]:
        # idempotent (add_members), so outside the fenced script; a fence counted against must be there
        pfadd_fenced(self.client, ops.members, self.keys.fence if expected else None)
        return self._apply.run(ops, expected, new_fence, meta, prefix=self.keys.prefix, reads=reads)

    def changed(self, increments: IncrementRows) -> Changed:
        """What :meth:`apply` of ``increments`` changes, without writing (to publish it again)."""
        return self._increments(self._ops(), increments)

    def _ops(self) -> ApplyOps:
        return ApplyOps(self.views.entity)

    def _increments(self, op: ApplyOps, increments: IncrementRows) -> Changed:
        """The writes of ``increments`` into ``op``: the entities' as a table, the others the views'."""
        table = increments_table(increments)
        entity = self.views.entity
        is_entity = pc.equal(table["kind"], entity.kind if entity is not None else "")
        op.events = table.filter(is_entity)
        return self.views.write(op, table.filter(pc.invert(is_entity)), op.events["item"].combine_chunks())

    def read_back(self, applied: Changed, windows_ms: Mapping[str, int], top_n: int,
                  ) -> list[dict[str, Any]]:
        """The absolute values of what an apply changed, as summary records (read now)."""
        return applied.records(self._apply.read(applied.reads(dict(windows_ms), top_n)))

    def record_metrics(self, query: str, metrics: Mapping[str, Any]) -> None:
        """The last batch's metrics (hash) and the last HISTORY batches (list, newest first)."""
        text = json.dumps(metrics)
        flat: dict[Any, Any] = {k: json.dumps(v) if isinstance(v, dict | list) else str(v)
                                for k, v in metrics.items()}
        with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(self.keys("metrics", query))
            pipe.hset(self.keys("metrics", query), mapping=flat)
            pipe.lpush(self.keys("metrics", query, "history"), text)
            pipe.ltrim(self.keys("metrics", query, "history"), 0, HISTORY - 1)
            pipe.execute()

    def close(self) -> None:
        """Release the connections."""
        self._apply.close()
        self.client.close()


@functools.cache
def task_client(kwargs: tuple[tuple[str, Any], ...]) -> redis.Redis:
    """A Redis client kept per Python worker for the tasks' member writes."""
    return redis.Redis(**dict(kwargs), socket_timeout=30)
