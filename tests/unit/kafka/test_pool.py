"""The executor consumer pool's rules: placement, reuse, idle close, capacity, errors, retries."""

from __future__ import annotations

import threading
from typing import NamedTuple

import pytest

from jobs.kafka.pool import ConsumerPool, placement, pool_key

KEY = ("cfg", "t", 0)
OTHER = ("cfg", "t", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Factory:
    """Hands out numbered stand-in consumers and records which were closed."""

    def __init__(self) -> None:
        self.made = 0
        self.closed: list[str] = []

    def __call__(self) -> str:
        self.made += 1
        return f"c{self.made}"

    def close(self, consumer: str) -> None:
        self.closed.append(consumer)


@pytest.fixture()
def factory() -> Factory:
    return Factory()


@pytest.fixture()
def clock() -> Clock:
    return Clock()


@pytest.fixture()
def pool(factory: Factory, clock: Clock) -> ConsumerPool[str]:
    return ConsumerPool(factory.close, capacity=3, idle_timeout_s=60, skip_max=100, clock=clock)


class Taken(NamedTuple):
    consumer: str
    placement: str


def read(pool: ConsumerPool[str], factory: Factory, key, start: int, end: int, *,
         ok: bool = True, leftover=(), retry: bool = False):
    """One task: lease at ``start``, finish the range at ``end`` (or fail); what it was lent."""
    lease = pool.acquire(key, factory, start, retry=retry)
    taken = Taken(lease.consumer, lease.placement)
    lease.position, lease.pending = (end, list(leftover)) if ok else (None, [])
    pool.release(lease, reusable=ok)
    return taken


@pytest.mark.parametrize(("position", "start", "expected"), [
    (None, 0, "assign"),
    (50, 50, "reuse"),
    (50, 51, "skip"),
    (50, 150, "skip"),
    (50, 151, "seek"),
    (50, 49, "seek"),
    (50, 0, "seek"),
])
def test_placement(position, start, expected):
    assert placement(position, start, skip_max=100) == expected


def test_consecutive_ranges_reuse_one_consumer(pool, factory):
    first = read(pool, factory, KEY, 0, 40)
    second = read(pool, factory, KEY, 40, 90)
    third = read(pool, factory, KEY, 90, 95)
    assert (first.placement, second.placement, third.placement) == ("assign", "reuse", "reuse")
    assert first.consumer == second.consumer == third.consumer == "c1"
    stats = pool.stats()
    assert (stats["created"], stats["reuse"], stats["idle"], stats["in_use"]) == (1, 2, 1, 0)


def test_pending_records_survive_only_an_aligned_reuse(pool, factory):
    read(pool, factory, KEY, 0, 40, leftover=["m41", "m42"])
    aligned = pool.acquire(KEY, factory, 40)
    assert aligned.pending == ["m41", "m42"]
    aligned.position, aligned.pending = 50, ["m51"]
    pool.release(aligned, reusable=True)
    behind = pool.acquire(KEY, factory, 10)
    assert (behind.placement, behind.pending) == ("seek", [])


def test_a_range_a_little_ahead_skips_and_far_ahead_seeks(pool, factory):
    read(pool, factory, KEY, 0, 40)
    assert read(pool, factory, KEY, 90, 100).placement == "skip"
    assert read(pool, factory, KEY, 500, 510).placement == "seek"
    assert factory.made == 1


def test_other_partitions_get_their_own_consumers(pool, factory):
    read(pool, factory, KEY, 0, 10)
    other = read(pool, factory, OTHER, 0, 10)
    assert other.consumer == "c2" and other.placement == "assign"
    assert read(pool, factory, KEY, 10, 20).consumer == "c1"


def test_a_failed_or_abandoned_read_closes_its_consumer(pool, factory):
    read(pool, factory, KEY, 0, 10)
    read(pool, factory, KEY, 10, 20, ok=False)
    assert factory.closed == ["c1"]
    after = read(pool, factory, KEY, 20, 30)
    assert (after.consumer, after.placement) == ("c2", "assign")
    assert pool.stats()["closed_error"] == 1


def test_idle_consumers_are_closed_after_the_timeout(pool, factory, clock):
    read(pool, factory, KEY, 0, 10)
    clock.now += 59
    assert pool.evict_idle() == 0
    read(pool, factory, OTHER, 0, 10)
    clock.now += 2
    assert pool.evict_idle() == 1
    assert factory.closed == ["c1"]
    assert read(pool, factory, KEY, 10, 20).consumer == "c3"
    assert pool.stats()["closed_idle"] == 1


def test_capacity_closes_the_least_recently_used(pool, factory, clock):
    for partition in range(4):
        clock.now += 1
        read(pool, factory, ("cfg", "t", partition), 0, 10)
    assert factory.closed == ["c1"]
    assert pool.stats()["idle"] == 3 and pool.stats()["closed_capacity"] == 1


def test_capacity_zero_means_no_pooling(pool, factory):
    pool.configure(capacity=0, idle_timeout_s=60)
    read(pool, factory, KEY, 0, 10)
    read(pool, factory, KEY, 10, 20)
    assert factory.made == 2 and factory.closed == ["c1", "c2"]
    assert (pool.stats()["closed_capacity"], pool.stats()["closed_error"]) == (2, 0)


def test_a_task_retry_drops_the_keys_consumers(pool, factory):
    read(pool, factory, KEY, 0, 10)
    read(pool, factory, OTHER, 0, 10)
    retried = read(pool, factory, KEY, 10, 20, retry=True)
    assert retried.consumer == "c3" and factory.closed == ["c1"]
    assert read(pool, factory, OTHER, 10, 20).consumer == "c2"


def test_a_leased_consumer_is_never_handed_out_twice(pool, factory):
    read(pool, factory, KEY, 0, 10)
    first = pool.acquire(KEY, factory, 10)
    second = pool.acquire(KEY, factory, 10)
    assert (first.consumer, second.consumer) == ("c1", "c2")
    assert pool.stats()["in_use"] == 2
    for lease, end in ((first, 20), (second, 30)):
        lease.position = end
        pool.release(lease, reusable=True)
    assert pool.acquire(KEY, factory, 30).consumer == "c2"


def test_concurrent_tasks_never_share_a_consumer(factory):
    pool: ConsumerPool[str] = ConsumerPool(factory.close, capacity=8)
    holders: dict[str, int] = {}
    clashes: list[str] = []
    lock = threading.Lock()

    def task(index: int) -> None:
        for _ in range(200):
            lease = pool.acquire(KEY, factory, 0)
            with lock:
                if lease.consumer in holders:
                    clashes.append(lease.consumer)
                holders[lease.consumer] = index
            with lock:
                del holders[lease.consumer]
            lease.position = 0
            pool.release(lease, reusable=True)

    threads = [threading.Thread(target=task, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert clashes == []
    assert pool.stats()["in_use"] == 0 and factory.made <= 4


def test_pool_key_separates_configs_and_keeps_no_secret():
    plain = pool_key({"bootstrap.servers": "a:1"}, "p", "t", 0)
    secret = pool_key({"bootstrap.servers": "a:1", "sasl.password": "hunter2"}, "p", "t", 0)
    assert plain[1:] == ("t", 0) and plain[0] != secret[0]
    assert "hunter2" not in repr(secret)
    assert pool_key({"bootstrap.servers": "a:1"}, "p", "t", 0) == plain


def test_stats_count_per_topic(pool, factory):
    read(pool, factory, ("cfg", "a", 0), 0, 10)
    read(pool, factory, ("cfg", "a", 0), 10, 20)
    read(pool, factory, ("cfg", "b", 0), 0, 5)
    a, b, everything = pool.stats("a"), pool.stats("b"), pool.stats()
    assert (a["created"], a["assign"], a["reuse"], a["idle"]) == (1, 1, 1, 1)
    assert (b["created"], b["reuse"], b["idle"]) == (1, 0, 1)
    assert (everything["created"], everything["reuse"], everything["idle"]) == (2, 1, 2)
    assert pool.stats("never-read")["created"] == 0
