"""The fenced apply of the Redis summaries (docs/streaming.md, "The fence").

A batch's writes go to Redis in chunks, each one ``MULTI``/``EXEC`` transaction guarded by a
``WATCH`` of the fence hash: before a chunk the fence is read and checked (the first chunk: it
still holds the offsets the batch was counted against; later chunks: it names this batch and
this chunk as the next), and the chunk's transaction moves it on (the last chunk: to the batch's
new offsets). Redis runs a transaction alone, and refuses it when another client touched the
fence since the check, so each chunk is made once or not at all, a batch resumed after a crash
skips the chunks already made, and a batch replayed after it was applied (same offsets) makes
nothing. The commands are sent as RESP bytes (:mod:`jobs.streaming.resp`); the reads of what the
batch changed (the summaries published to the summaries topic) go in the last transaction, after the
fence moved, or as a pipeline after it when there are many.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import hiredis
import pyarrow as pa
import redis

from jobs.errors import KappaError
from jobs.streaming.aggregates import increment_arrow_schema
from jobs.streaming.apply_chunks import Span, chunk_writes
from jobs.streaming.fence_fields import STREAM_SUFFIX, Partition, field_partition
from jobs.streaming.resp import EntityHash, EntityWrites, Transaction, Wire, entity_reads, pack

SCRIPT_CHUNK = 1000
"""Members per ``ZADD`` of a window index: one command stays small."""
APPLY_CHUNK_ARGS = 20_000
"""Command arguments per transaction. Redis serves no other client while a transaction runs, so
a batch's writes go in chunks of about this many arguments (docs/streaming.md, "The fence"): a
reader waits at most one chunk's time."""
READ_CHUNK = 5_000
"""Reads made inside the last transaction at most (each a small HMGET / ZREVRANGE / PFCOUNT);
more go as a pipeline after it, which Redis interleaves with other clients."""
MARK = ("apply_marker", "apply_chunk")


class SummarySinkError(KappaError):
    """Redis refused or lost a summary write."""


class FenceMoved(SummarySinkError):
    """Another writer applied offsets of the same partitions between our read and our write."""


class RedisViewLost(SummarySinkError):
    """The fence hash is gone where it must be: Redis lost the view's data (docs/runbooks/redis-lost.md).

    ``found`` says what expected the fence: ``"batch 4 expects offsets in it"``.
    """

    def __init__(self, fence_key: str, found: str) -> None:
        super().__init__(
            f"Redis lost the view's data: the fence {fence_key} is gone while {found} (a Redis restart "
            "without persistence, a failover or a FLUSHALL). The job stops so that no partial counts "
            "are written as if current; its Kafka outputs are complete up to its last committed "
            "batch. Rebuild every view from the log with `kappa reprocess start` and promote it "
            "(docs/runbooks/redis-lost.md)")

    @classmethod
    def of_batch(cls, fence_key: str, batch_id: object) -> RedisViewLost:
        """The loss found by the apply of ``batch_id``, which counted against the fence."""
        return cls(fence_key, f"batch {batch_id} expects offsets in it")


class ApplyOps:
    """The writes of an apply: ``ops("HINCRBY", key, field, n)``.

    The entities' hashes are :attr:`events` instead, the batch's increment rows of the
    :class:`EntityHash` kind ``entity`` as a table (formatted column-wise straight into wire
    bytes, :class:`EntityWrites`). ``PFADD``s (``pfadd``, as :func:`add_members` calls it on a
    pipeline) are kept apart in ``members``: they are idempotent and go outside the fence.
    """

    def __init__(self, entity: EntityHash | None = None) -> None:
        self.ops: list[list[str]] = []
        self.events: pa.Table = increment_arrow_schema().empty_table()
        self.members: list[list[str]] = []
        self.entity = entity

    def __call__(self, command: str, *args: object) -> None:
        """Add one command (arguments as Redis receives them: strings)."""
        self.ops.append([command, *map(str, args)])

    def pfadd(self, key: str, *values: str) -> None:
        """Add the member ids of one HyperLogLog."""
        self.members.append([key, *values])


@dataclass
class Reads:
    """Reads made after an apply: generic commands, then the entities' hashes.

    Each entity is ``HMGET <prefix><id> <fields> <label>`` (:class:`EntityHash`);
    :meth:`FencedApply.run` answers the reads in that order.
    """

    commands: list[list[str]] = field(default_factory=list)
    events: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))
    entity: EntityHash | None = None

    def __len__(self) -> int:
        return len(self.commands) + len(self.events)

    def refused(self, replies: list[Any]) -> list[str]:
        """``"<command> <key>: <error>"`` of each read Redis refused (``replies`` in order)."""
        return [f"{self._name(i)}: {reply}" for i, reply in enumerate(replies)
                if isinstance(reply, hiredis.ReplyError)]

    def _name(self, index: int) -> str:
        if index < len(self.commands):
            return " ".join(self.commands[index][:2])
        prefix = self.entity.prefix if self.entity is not None else ""
        return f"HMGET {prefix}{self.events[index - len(self.commands)].as_py()}"

    def wire(self) -> bytes:
        """The reads as RESP bytes."""
        return b"".join(pack(*command) for command in self.commands) + entity_reads(self.events, self.entity)


class FencedApply:
    """The fenced, chunked apply on one fence hash (module docstring)."""

    def __init__(self, client: redis.Redis, fence_key: str, chunk_args: int = APPLY_CHUNK_ARGS) -> None:
        self.fence_key, self.chunk_args = fence_key, chunk_args
        self._wire = Wire(client)

    def run(self, ops: ApplyOps, expected: Mapping[Partition, int], new_fence: Mapping[Partition, int],
            meta: Mapping[str, Any], *, prefix: str, reads: Reads | None = None) -> list[Any]:
        """Make ``ops`` and move the fence to ``new_fence`` if it still holds ``expected``; then ``reads``.

        Returns the replies of ``reads``, in their order. Raises FenceMoved (nothing written) when
        another writer moved the fence or holds it, RedisViewLost (nothing more written) when the
        fence hash is gone though ``expected`` names offsets or a chunk was made, SummarySinkError
        when Redis refused a write or a read (the others made, the fence moved: a replay must never
        count the rest twice).
        """
        reads = reads or Reads()
        fence: dict[str, str] = {f"{t}:{p}": str(o) for (t, p), o in new_fence.items()}
        fence |= {key: str(meta[key]) for key in ("batch_id", "query") if key in meta}
        fence |= {f"{t}:{p}{STREAM_SUFFIX}": "" if stream_ms is None else str(stream_ms)
                  for (t, p), stream_ms in meta.get("stream_ms", {}).items() if (t, p) in new_fence}
        fence["updated_ms"] = str(int(time.time() * 1000))
        expect = {f"{t}:{p}": str(expected[(t, p)]) if (t, p) in expected else "" for (t, p) in new_fence}
        chunks = chunk_writes(ops.ops, ops.events.num_rows, self.chunk_args)
        inline = reads if len(reads) <= READ_CHUNK else None
        marker = f"{meta.get('query')}/{meta.get('batch_id')}/{len(chunks)}/{self.chunk_args}"
        try:
            replies, failed = self._chunks(ops, chunks, marker, expect, fence=fence, inline=inline,
                                           fenced=bool(expected))
        except BaseException:
            self._wire.close()   # a WATCH or replies may be left on the connection
            raise
        failed += inline.refused(replies) if inline else []
        if failed:
            raise SummarySinkError(f"{len(failed)} Redis command(s) of batch {meta.get('batch_id')} failed "
                                   f"(the fence moved, the others applied), first: {failed[0]}; "
                                   f"another program writes keys under the prefix {prefix!r}: stop "
                                   "it, then rebuild the summaries (docs/runbooks/redis-lost.md)")
        if reads and inline is None:
            return self.read(reads)
        return replies

    def _chunks(self, ops: ApplyOps, chunks: list[tuple[Span, Span]], marker: str, expect: dict[str, str],
                *, fence: dict[str, str], inline: Reads | None, fenced: bool) -> tuple[list[Any], list[str]]:
        """Each chunk's check and transaction: the last one's read replies, the refused writes.

        The next chunk's bytes are made while Redis runs the transaction before. ``fenced``: the
        batch counted against a fence, so the fence hash must exist from the first chunk on.
        """
        failed: list[str] = []
        replies: list[Any] = []
        waiting: tuple[Callable[[], Transaction], list[list[str]], EntityWrites, bool] | None = None
        for index, (op_span, event_span) in enumerate(chunks):
            last = index == len(chunks) - 1
            writes = ops.ops[op_span[0]:op_span[1]]
            events = EntityWrites(ops.events.slice(event_span[0], event_span[1] - event_span[0]),
                                  ops.entity)   # made while Redis runs the chunk before
            if last:
                tail = [pack("HDEL", self.fence_key, *MARK), pack("HSET", self.fence_key, *_flat(fence))]
            else:
                tail = [pack("HSET", self.fence_key, MARK[0], marker, MARK[1], str(index + 1))]
            read_body, read_count = (inline.wire(), len(inline)) if last and inline else (b"", 0)
            body = b"".join([*(pack(*op) for op in writes), events.wire, *tail, read_body])
            if waiting is not None:
                replies = self._made(*waiting, failed, marker=marker)
                waiting = None
            status, detail = self._check(index, marker, expect if index == 0 else {}, fenced=fenced)
            if status == "done":
                continue
            if status == "lost":
                raise RedisViewLost.of_batch(self.fence_key, meta_batch(marker))
            if status == "moved":
                moved = {tp: int(value) if value else None for name, value in detail
                         if (tp := field_partition(name)) is not None}
                raise FenceMoved(f"the Redis fence moved while the batch was computed ({moved}); "
                                 "another query writes the same summaries: stop it")
            if status != "go":
                raise FenceMoved(f"the Redis fence holds another apply in progress ({status}: {detail}, "
                                 f"this one {marker} chunk {index}); another query writes the same "
                                 "summaries: stop it")
            finish = self._wire.begin(body, len(writes) + events.commands + len(tail), read_count)
            waiting = (finish, writes, events, fenced or index > 0)
        if waiting is not None:
            replies = self._made(*waiting, failed, marker=marker)
        return replies, failed

    def _check(self, index: int, marker: str, expect: Mapping[str, str], *,
               fenced: bool = False) -> tuple[str, Any]:
        """``WATCH`` the fence and check it for chunk ``index``: (verdict, detail).

        ``go`` (the fence stays watched until the chunk's transaction), ``done`` (an earlier
        attempt made this chunk), ``lost`` (the fence hash is gone: a later chunk, or ``fenced``,
        the batch counted against a fence), ``moved`` (chunk 0: the fence no longer holds
        ``expect``; detail: (field, value) pairs), ``busy`` (another batch's apply is in
        progress), ``order`` (not the next chunk).
        """
        check = (pack("WATCH", self.fence_key) + pack("HMGET", self.fence_key, *MARK, *expect)
                 + pack("EXISTS", self.fence_key))
        _, have, exists = self._wire.exchange(check, 3)
        held, at = have[0], int(have[1] or 0)
        verdict: tuple[str, Any] = ("go", None)
        if not exists and (index > 0 or fenced):
            verdict = ("lost", None)
        elif held is not None and held != marker:
            verdict = ("busy", held)
        elif held is not None and index != at:
            verdict = ("done", None) if index < at else ("order", f"next chunk {at}")
        elif held is None and index > 0:
            verdict = ("order", "no apply in progress")
        elif held is None:
            moved = [(name, value) for name, value in zip(expect, have[2:], strict=True)
                     if (value or "") != expect[name]]
            verdict = ("moved", moved) if moved else verdict
        if verdict[0] != "go":
            self._wire.exchange(pack("UNWATCH"), 1)
        return verdict

    def _made(self, finish: Callable[[], Transaction], writes: list[list[str]], events: EntityWrites,
              needs_fence: bool, failed: list[str], *, marker: str) -> list[Any]:
        """Wait for a chunk's transaction; its refused writes to ``failed``; its reads' replies.

        ``needs_fence``: the fence hash existed at the chunk's check (a later chunk, or a batch that
        counted against a fence), so a refused transaction whose fence is gone since is a lost view.
        """
        try:
            made = finish()
        except redis.ResponseError as exc:  # a command Redis could not queue
            raise SummarySinkError(str(exc)) from exc
        if made.aborted and needs_fence and not self._wire.exchange(pack("EXISTS", self.fence_key), 1)[0]:
            raise RedisViewLost.of_batch(self.fence_key, meta_batch(marker))
        if made.aborted:
            raise FenceMoved("the Redis fence changed between its check and the chunk's transaction; "
                             "another query writes the same summaries: stop it")
        if made.refused:
            names = [" ".join(op[:2]) for op in writes] + events.names()
            failed += [f"{names[i] if i < len(names) else 'fence'}: {error}" for i, error in made.refused]
        return made.reads

    def read(self, reads: Reads) -> list[Any]:
        """The replies of ``reads`` alone, in the shape :meth:`run` gives them; raise if one is refused.

        Sent as one pipeline: Redis serves other clients between its commands.
        """
        replies = self._wire.exchange(reads.wire(), len(reads))
        failed = reads.refused(replies)
        if failed:
            raise SummarySinkError(f"{len(failed)} Redis read(s) failed, first: {failed[0]}; another "
                                   "program writes keys under the summaries' prefix: stop it, then "
                                   "rebuild the summaries (docs/runbooks/redis-lost.md)")
        return replies

    def close(self) -> None:
        """Drop the apply's connection."""
        self._wire.close()


def meta_batch(marker: str) -> str:
    """The batch id of an apply marker (``<query>/<batch_id>/<chunks>/<chunk_args>``)."""
    parts = marker.split("/")
    return parts[-3] if len(parts) >= 3 else marker


def _flat(mapping: Mapping[str, str]) -> list[str]:
    return [item for pair in mapping.items() for item in pair]
