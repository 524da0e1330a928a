"""Executor-side pool of Kafka consumers, kept between micro-batches.

The JVM connector caches its consumers per executor (KafkaDataConsumer / InternalKafkaConsumerPool,
keyed by group id and topic-partition); here the same idea lives in the Python worker process:
Spark reuses Python workers between tasks (``spark.python.worker.reuse``, true by default), so a
module-level pool outlives the task that filled it. A consumer is leased by one task at a time;
the lease says how the task must position it for its range:

- ``reuse``: the consumer stopped exactly where the new range starts; the records it already
  handed out past the last range's end (kept in ``pending``) are valid and served first.
- ``skip``: the range starts a little ahead (at most ``skip_max`` offsets, e.g. because the
  partition's previous batch ran in another worker).
- ``seek``: anywhere else (behind, or far ahead).
- ``assign``: a new consumer, or one whose state is unknown after an error.

A pooled consumer is paused while idle and librdkafka drops what it prefetched then, so the
reader seeks every reused consumer to where it must continue (jobs/kafka/consumer.py); the
placement decides which consumer to lease and what ``pending`` is worth. Records fetched past a
streaming range are kept for other workers by the fetch spill (jobs/kafka/spill.py).

Consumers are closed when a task fails or stops early (the lease is not returned as reusable),
when idle longer than ``idle_timeout_s``, beyond ``capacity`` idle consumers (least recently
used first), and for every key a task retry (attempt >= 1) reads. Pure Python with no Kafka
client, so the rules are unit-tested with a stand-in consumer.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

logger = logging.getLogger(__name__)

C = TypeVar("C")
PoolKey = tuple[str, str, int]
Placement = Literal["reuse", "skip", "seek", "assign"]
DEFAULT_CAPACITY = 16
DEFAULT_IDLE_TIMEOUT_S = 300.0
SKIP_MAX_OFFSETS = 100_000
COUNTERS = ("created", "reuse", "skip", "seek", "assign", "closed_error", "closed_idle",
            "closed_capacity", "closed_retry")


def pool_key(kafka: Mapping[str, str], group_prefix: str, topic: str, partition: int) -> PoolKey:
    """The pool key: a digest of the client properties (no secrets kept) and the topic-partition."""
    text = repr(sorted(kafka.items())) + "\0" + group_prefix
    return hashlib.sha256(text.encode()).hexdigest()[:16], topic, partition


def placement(position: int | None, start: int, skip_max: int = SKIP_MAX_OFFSETS) -> Placement:
    """How a consumer that stopped at ``position`` (None: unknown) reaches ``start``."""
    if position is None:
        return "assign"
    if position == start:
        return "reuse"
    if position < start <= position + skip_max:
        return "skip"
    return "seek"


@dataclass(eq=False)
class Lease(Generic[C]):
    """One pooled consumer and what is known about it; held by one task at a time."""

    key: PoolKey
    consumer: C
    position: int | None = None
    pending: list[Any] = field(default_factory=list)
    last_used: float = 0.0
    placement: Placement = "assign"


class ConsumerPool(Generic[C]):
    """A thread-safe pool of consumers keyed by (client properties, topic, partition)."""

    def __init__(self, close: Callable[[C], None] | None = None, *,
                 capacity: int = DEFAULT_CAPACITY, idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
                 skip_max: int = SKIP_MAX_OFFSETS, clock: Callable[[], float] = time.monotonic,
                 reaper_interval_s: float | None = None) -> None:
        self._close = close or (lambda consumer: None)
        self.capacity = capacity
        self.idle_timeout_s = idle_timeout_s
        self.skip_max = skip_max
        self._clock = clock
        self._lock = threading.Lock()
        self._idle: dict[PoolKey, list[Lease[C]]] = {}
        self._in_use: Counter[str] = Counter()
        self._counts: dict[str, Counter[str]] = {}
        self._reaper_interval_s = reaper_interval_s
        self._reaper: threading.Thread | None = None

    def configure(self, *, capacity: int, idle_timeout_s: float) -> None:
        """Adopt the limits of the read about to lease (the pool is shared by the worker's reads)."""
        with self._lock:
            self.capacity, self.idle_timeout_s = capacity, idle_timeout_s

    def acquire(self, key: PoolKey, create: Callable[[], C], start: int, *,
                retry: bool = False) -> Lease[C]:
        """Lease the best idle consumer of ``key`` for a range starting at ``start``, or a new one."""
        doomed: list[Lease[C]] = []
        with self._lock:
            doomed += self._expired_locked()
            if retry:
                doomed += self._take_key_locked(key, "closed_retry")
            lease = self._best_locked(key, start)
            self._in_use[key[1]] += 1
        self._close_all(doomed)
        if lease is None:
            lease = Lease(key, create())
            with self._lock:
                self._count([key], "created")
        lease.placement = placement(lease.position, start, self.skip_max)
        if lease.placement in ("seek", "assign"):
            lease.pending = []
        with self._lock:
            self._count([lease.key], lease.placement)
        return lease

    def release(self, lease: Lease[C], *, reusable: bool) -> None:
        """Return a lease: keep it for the next range when reusable, else close it."""
        doomed: list[Lease[C]] = []
        with self._lock:
            self._in_use[lease.key[1]] -= 1
            if reusable and self.capacity > 0:
                lease.last_used = self._clock()
                self._idle.setdefault(lease.key, []).append(lease)
                doomed += self._over_capacity_locked()
            else:
                self._count([lease.key], "closed_error" if not reusable else "closed_capacity")
                doomed.append(lease)
            doomed += self._expired_locked()
        self._close_all(doomed)
        self._start_reaper()

    def evict_idle(self) -> int:
        """Close consumers idle longer than the timeout; return how many."""
        with self._lock:
            doomed = self._expired_locked()
        self._close_all(doomed)
        return len(doomed)

    def clear(self) -> None:
        """Close every idle consumer (leases in use are closed when released)."""
        with self._lock:
            doomed = [lease for leases in self._idle.values() for lease in leases]
            self._idle.clear()
        self._close_all(doomed)

    def stats(self, topic: str | None = None) -> dict[str, int]:
        """Counters since the worker started, plus ``idle`` and ``in_use`` consumers now.

        Counters: ``created``; leases by placement (``reuse``, ``skip``, ``seek``, ``assign``);
        consumers closed after an error or early stop (``closed_error``), when idle too long
        (``closed_idle``), over capacity (``closed_capacity``), on a task retry (``closed_retry``).
        With ``topic``, only that topic's consumers.
        """
        with self._lock:
            topics = [topic] if topic is not None else list(self._counts)
            totals = Counter(dict.fromkeys(COUNTERS, 0))
            for name in topics:
                totals.update(self._counts.get(name, Counter()))
            idle = sum(len(leases) for key, leases in self._idle.items()
                       if topic is None or key[1] == topic)
            in_use = self._in_use[topic] if topic is not None else sum(self._in_use.values())
            return {**totals, "idle": idle, "in_use": in_use}

    def _best_locked(self, key: PoolKey, start: int) -> Lease[C] | None:
        """The idle lease to use: at ``start``, else closest behind it within skip, else newest."""
        leases = self._idle.get(key)
        if not leases:
            return None
        rank = {"reuse": 0, "skip": 1, "seek": 2, "assign": 3}

        def order(lease: Lease[C]) -> tuple[int, int, float]:
            kind = placement(lease.position, start, self.skip_max)
            gap = start - lease.position if kind == "skip" and lease.position is not None else 0
            return rank[kind], gap, -lease.last_used

        best = min(leases, key=order)
        leases.remove(best)
        if not leases:
            del self._idle[key]
        return best

    def _take_key_locked(self, key: PoolKey, reason: str) -> list[Lease[C]]:
        taken = self._idle.pop(key, [])
        self._count([lease.key for lease in taken], reason)
        return taken

    def _expired_locked(self) -> list[Lease[C]]:
        deadline = self._clock() - self.idle_timeout_s
        expired: list[Lease[C]] = []
        for key in list(self._idle):
            keep = [lease for lease in self._idle[key] if lease.last_used > deadline]
            expired += [lease for lease in self._idle[key] if lease.last_used <= deadline]
            if keep:
                self._idle[key] = keep
            else:
                del self._idle[key]
        self._count([lease.key for lease in expired], "closed_idle")
        return expired

    def _over_capacity_locked(self) -> list[Lease[C]]:
        idle = sorted((lease for leases in self._idle.values() for lease in leases),
                      key=lambda lease: lease.last_used)
        excess = idle[:max(0, len(idle) - self.capacity)]
        for lease in excess:
            self._idle[lease.key].remove(lease)
            if not self._idle[lease.key]:
                del self._idle[lease.key]
        self._count([lease.key for lease in excess], "closed_capacity")
        return excess

    def _count(self, keys: list[PoolKey], name: str) -> None:
        for key in keys:
            self._counts.setdefault(key[1], Counter())[name] += 1

    def _close_all(self, leases: list[Lease[C]]) -> None:
        for lease in leases:
            try:
                self._close(lease.consumer)
            except Exception as exc:  # a failed close must not fail the task
                logger.warning("kafka consumer pool close failed key=%s error=%s", lease.key, exc)

    def _start_reaper(self) -> None:
        """Close idle consumers in the background even when no task comes (daemon thread)."""
        interval = self._reaper_interval_s
        if interval is None or self._reaper is not None:
            return
        with self._lock:
            if self._reaper is not None:
                return

            def reap() -> None:
                while True:
                    time.sleep(interval)
                    self.evict_idle()

            self._reaper = threading.Thread(target=reap, name="kafka-consumer-pool-reaper",
                                            daemon=True)
        self._reaper.start()
