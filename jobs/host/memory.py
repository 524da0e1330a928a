"""Hand memory a Python worker freed back to the OS (glibc's arenas, Arrow's pool).

Spark keeps a Python worker for its next task, and a worker keeps its high-water mark unless told:
glibc keeps freed pages in its arenas and Arrow's allocator keeps its pool. A read that took a
whole partition (the embedded broker's answer to every fetch; a real broker's up to
``fetch.max.bytes``) would hold that size until the worker is closed. Called at the end of every
streaming task (jobs/streaming/task.py) and after each offset range a task fetched from Kafka
(jobs/kafka/consumer.py), so a task reading several partitions holds one fetch at a time.
Measured: docs/explanation/streaming-performance.md.

:func:`gc_paused` keeps the cyclic garbage collector out of a task's record loop.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa


def release_memory() -> None:
    """Return freed memory: Arrow's unused pool memory, then glibc's free arena pages."""
    pa.default_memory_pool().release_unused()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.cache
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None  # glibc only


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the block with Python's cyclic garbage collector off (as it was again after it).

    A task's record loop allocates a few dicts and tuples per record and keeps its summary
    counts, so the collector ran about 700 times per 50,000 records, now and then over every
    object the task holds: 3 us per record, 7 % of a task's CPU
    (docs/explanation/streaming-performance.md). What a task allocates
    is freed by reference counting; the rare cycle (an exception's traceback) waits for
    the collection the worker runs after every task (jobs/spark/worker_daemon.py), so a task
    holds at most its own cyclic garbage a little longer.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
