"""How a batch's Redis writes are cut into transactions (jobs/streaming/redis_script.py, "The fence").

Redis serves no other client while a transaction runs, so the writes go in chunks of a bounded
number of arguments; the cut depends only on the writes, so a batch resumed after a crash has the
chunks of its first attempt.
"""

from __future__ import annotations

EVENT_ARGS = 11
"""What one entity's writes count against a chunk's budget: ``HINCRBY key field n``,
``HSET key label name``, ``EXPIRE key ttl``."""
Span = tuple[int, int]
"""A range of positions, ``(start, end)``."""


def chunk_writes(ops: list[list[str]], events: int, budget: int) -> list[tuple[Span, Span]]:
    """A batch's writes cut into chunks of at most ``budget`` arguments.

    Per chunk: the range of ``ops`` and the range of entity rows (``ApplyOps.events``) it makes.

    The generic ops come first, cut in order (an op is never cut; one larger than the budget is
    a chunk of its own), then the events, :data:`EVENT_ARGS` each. The cut depends only on the
    writes, so a batch resumed from its pending file after a crash has the same chunks as its
    first attempt. A batch without writes still makes one (empty) chunk: it moves the fence.
    """
    chunks: list[tuple[Span, Span]] = []
    start, size = 0, 0
    for index, op in enumerate(ops):
        if index > start and size + len(op) > budget:
            chunks.append(((start, index), (0, 0)))
            start, size = index, 0
        size += len(op)
    per_chunk = max(1, budget // EVENT_ARGS)
    first = min(events, max(0, budget - size) // EVENT_ARGS) if start < len(ops) else 0
    if start < len(ops) or not events:
        chunks.append(((start, len(ops)), (0, first)))
    for at in range(first, events, per_chunk):
        chunks.append(((len(ops), len(ops)), (at, min(events, at + per_chunk))))
    return chunks
