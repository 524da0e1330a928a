"""The Redis sink of the live summaries: fenced increments, exactly-once in effect.

Key scheme and fence: docs/streaming.md ("Redis keys"). A batch's increments and the new fence
go to Redis as fenced transactions (jobs/streaming/redis_script.py) that check the fence first:
each chunk applied entirely or not at all, and never twice for the same offsets.
"""

from __future__ import annotations

import functools
import json
import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import redis

from jobs.common.config import KappaConfig
from jobs.streaming.aggregates import (
    CITY,
    EVENT,
    MEMBER,
    MEMBER_ALL,
    MEMBERS_ADDED,
    TOPIC,
    TOPIC_MINUTE,
    IncrementRows,
    increments_table,
)
from jobs.streaming.fence_fields import parse_fence, parse_stream_points
from jobs.streaming.members import add_members, pfadd_fenced
from jobs.streaming.redis_script import (
    SCRIPT_CHUNK,
    ApplyOps,
    FencedApply,
    Partition,
    Reads,
    SummarySinkError,
)
from jobs.streaming.summary_reads import SummaryReads

logger = logging.getLogger(__name__)

FENCE_SCOPE = "summaries"
HISTORY = 100
MAX_INDEXED_WINDOWS = 10_000

@dataclass
class Applied:
    """What an apply changed: the keys to read back and publish to the summaries topic."""

    cities: set[tuple[int, str]] = field(default_factory=set)
    trending: set[int] = field(default_factory=set)
    members: set[int] = field(default_factory=set)
    events: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))
    """The ids of the events changed, in the order of their writes."""
    topics: bool = False


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
        self.cfg = cfg
        self.keys = Keys(cfg.streaming.redis_prefix)
        self.slide_ms = cfg.streaming.trending_slide_s * 1000
        self.trending_steps = cfg.streaming.trending_window_s // cfg.streaming.trending_slide_s
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
              new_fence: Mapping[Partition, int], meta: Mapping[str, Any]) -> Applied:
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
        reads = SummaryReads(self.keys, applied, windows_ms, top_n)
        return reads.records(self._run(ops, expected, new_fence, meta, reads.reads))

    def _prepare(self, increments: IncrementRows, meta: Mapping[str, Any]) -> tuple[Applied, ApplyOps]:
        """A batch's writes as script operations, and what they change."""
        applied, ops = Applied(), self._ops()
        self._increments(ops, increments, applied)
        for name, value in meta.get("totals", {}).items():
            if value:
                ops("HINCRBY", self.keys("totals"), name, int(value))
        return applied, ops

    def _run(self, ops: ApplyOps, expected: Mapping[Partition, int], new_fence: Mapping[Partition, int],
             meta: Mapping[str, Any], reads: Reads | None = None) -> list[Any]:
        # idempotent (add_members), so outside the fenced script; a fence counted against must be there
        pfadd_fenced(self.client, ops.members, self.keys.fence if expected else None)
        return self._apply.run(ops, expected, new_fence, meta, prefix=self.keys.prefix, reads=reads)

    def changed(self, increments: IncrementRows) -> Applied:
        """What :meth:`apply` of ``increments`` changes, without writing (to publish it again)."""
        applied = Applied()
        self._increments(self._ops(), increments, applied)
        return applied

    def _ops(self) -> ApplyOps:
        return ApplyOps(self.keys("event", ""), self.cfg.streaming.event_ttl_s)

    def _increments(self, op: ApplyOps, increments: IncrementRows, applied: Applied) -> None:
        """The writes of ``increments`` into ``op``: the events' as a table, the others one by one."""
        table = increments_table(increments)
        is_event = pc.equal(table["kind"], EVENT)
        op.events = table.filter(is_event)
        applied.events = op.events["item"].combine_chunks()
        keys = self.keys
        members: dict[int, list[str]] = defaultdict(list)
        windows: dict[str, set[int]] = defaultdict(set)
        for row in table.filter(pc.invert(is_event)).to_pylist():
            kind, start, item = row["kind"], int(row["window_start"]), row["item"]
            if kind == CITY:
                op("HINCRBY", keys("cities", start), item, row["n"])
                applied.cities.add((start, item))
                windows["cities"].add(start)
            elif kind == TOPIC_MINUTE:
                op("ZINCRBY", keys("topics", "minute", start), row["n"], item)
                windows["topics:minute"].add(start)
            elif kind == TOPIC:
                op("ZINCRBY", keys("topics", "all"), row["n"], item)
                applied.topics = True
            elif kind == MEMBER:
                members[start].append(item)
            elif kind == MEMBER_ALL:
                members[-1].append(item)
            elif kind == MEMBERS_ADDED:  # a task added them (add_members): index and expire only
                applied.members.add(start)
                windows["members"].add(start)
        add_members(op, keys, members)
        for start in members:
            if start >= 0:
                applied.members.add(start)
                windows["members"].add(start)
        self._trending(op, windows["topics:minute"], applied, windows)
        self._index(op, windows)

    def _index(self, op: ApplyOps, windows: Mapping[str, set[int]]) -> None:
        """Expire the windows written and add them to their kind's index of windows."""
        ttl, keys = self.cfg.streaming.window_ttl_s, self.keys
        for name, starts in windows.items():
            if not starts:  # e.g. no on-time topics in the batch: ZADD refuses an empty mapping
                continue
            for start in starts:
                op("EXPIRE", keys(name, start), ttl)
            ordered = sorted(starts)
            for i in range(0, len(ordered), SCRIPT_CHUNK):  # one command stays small
                op("ZADD", keys(name, "windows"), *(x for s in ordered[i:i + SCRIPT_CHUNK] for x in (s, s)))
            op("ZREMRANGEBYRANK", keys(name, "windows"), 0, -MAX_INDEXED_WINDOWS - 1)

    def _trending(self, op: ApplyOps, minutes: set[int], applied: Applied,
                  windows: dict[str, set[int]]) -> None:
        """Rebuild every sliding window a changed bucket belongs to, as an absolute union."""
        starts = {m - k * self.slide_ms for m in minutes for k in range(self.trending_steps)}
        for start in sorted(starts):
            buckets = [self.keys("topics", "minute", start + k * self.slide_ms)
                       for k in range(self.trending_steps)]
            op("ZUNIONSTORE", self.keys("trending", start), len(buckets), *buckets)
            applied.trending.add(start)
            windows["trending"].add(start)

    def read_back(self, applied: Applied, windows_ms: Mapping[str, int], top_n: int,
                  ) -> list[dict[str, Any]]:
        """The absolute values of what an apply changed, as summary records (read now)."""
        reads = SummaryReads(self.keys, applied, windows_ms, top_n)
        return reads.records(self._apply.read(reads.reads))

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
