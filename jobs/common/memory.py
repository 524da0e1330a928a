"""Hand memory a Python worker freed back to the OS (glibc's arenas, Arrow's pool).

Spark keeps a Python worker for its next task, and a worker keeps its high-water mark unless told:
glibc keeps freed pages in its arenas and Arrow's allocator keeps its pool. A read that took a
whole partition (the embedded broker's answer to every fetch; a real broker's up to
``fetch.max.bytes``) would hold that size until the worker is closed. Called at the end of every
streaming task (jobs/streaming/task.py) and after each offset range a task fetched from Kafka
(jobs/common/kafka/consumer.py), so a task reading several partitions holds one fetch at a time.
Measured in docs/benchmarks.md ("Streaming job").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
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
