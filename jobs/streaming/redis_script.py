"""The fenced apply of the Redis summaries: one Lua script call per batch (docs/streaming.md, "The fence").

The script checks that the fence still holds what the batch read, makes every write of the batch,
then moves the fence. Redis runs a script alone, from its first command to its last, so a batch
is applied entirely or not at all, and a batch replayed after a crash (same offsets) applies
nothing. The writes travel as one JSON document (:class:`ScriptOps`), not as a pipeline of
commands that redis-py would encode and whose replies it would parse one by one; so do the reads
of what the batch changed (the summaries published to rsvps.summaries), made by the same call
after the writes, their replies returned in one array.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import redis

from jobs.common.errors import KappaError

SCRIPT_CHUNK = 1000
"""Members per ``ZADD`` inside the apply script: Lua cannot ``unpack`` a list of over ~8,000."""
APPLY_CHUNK_ARGS = 20_000
"""Command arguments per apply script call. Redis serves no other client while a script runs, so a
batch's writes go in chunks of about this many arguments, each its own call (docs/streaming.md,
"The fence"): a reader waits at most one chunk's time."""
READ_CHUNK = 5_000
"""Reads per read script call after a batch (each a small HGETALL / ZREVRANGE / PFCOUNT)."""
Partition = tuple[str, int]
_encode = msgspec.json.Encoder().encode

READ_LUA = """
-- The reads of a batch's summaries: their replies in order; a refused read adds to ``failed``
-- (its reply false). Shared by both scripts, so both answer in the shape Lua gives them.
local function read_all(reads, failed)
  local replies = {}
  for i, read in ipairs(reads or {}) do
    local reply = redis.pcall(unpack(read))
    if type(reply) == 'table' and reply.err then
      failed[#failed + 1] = read[1] .. ' ' .. tostring(read[2]) .. ': ' .. reply.err
      reply = false
    end
    replies[i] = reply
  end
  return replies
end
"""
APPLY_SCRIPT = READ_LUA + """
-- One chunk of a batch's writes. KEYS[1]: the fence hash. ARGV[1]: JSON {"marker": query/batch/
-- chunks, "chunk": i (from 0), "last": bool, "expect": [field, offset or "", ...] (checked by
-- chunk 0), "fence": [field, value, ...] (set by the last chunk), "ops": [[command, arg, ...], ...],
-- "reads": [[command, arg, ...], ...] (the last chunk's)}. Between chunks the fence hash holds
-- apply_marker / apply_chunk: the next chunk of the batch in progress, so a batch resumed after a
-- crash skips the chunks already made and no chunk counts twice.
local batch = cjson.decode(ARGV[1])
local marker = redis.call('HGET', KEYS[1], 'apply_marker')
if marker then
  local at = tonumber(redis.call('HGET', KEYS[1], 'apply_chunk') or '0')
  if marker ~= batch.marker then return {'busy', {marker}} end
  if batch.chunk < at then return {'done', {}} end
  if batch.chunk > at then return {'order', {tostring(at)}} end
else
  if batch.chunk > 0 then return {'order', {'none'}} end
  local moved = {}
  for i = 1, #batch.expect, 2 do
    local have = redis.call('HGET', KEYS[1], batch.expect[i]) or ''
    if have ~= batch.expect[i + 1] then
      moved[#moved + 1] = batch.expect[i]
      moved[#moved + 1] = have
    end
  end
  if #moved > 0 then return {'moved', moved} end
end
local failed = {}
local ok, err = pcall(function()
  for _, op in ipairs(batch.ops) do
    local reply = redis.pcall(unpack(op))
    if type(reply) == 'table' and reply.err then
      failed[#failed + 1] = op[1] .. ' ' .. tostring(op[2]) .. ': ' .. reply.err
    end
  end
end)
if not ok then failed[#failed + 1] = 'script: ' .. tostring(err) end
if batch.last then
  redis.call('HDEL', KEYS[1], 'apply_marker', 'apply_chunk')
  redis.call('HSET', KEYS[1], unpack(batch.fence))
else
  redis.call('HSET', KEYS[1], 'apply_marker', batch.marker, 'apply_chunk', batch.chunk + 1)
end
return {'applied', failed, read_all(batch.reads, failed)}
"""
"""The fenced apply, one chunk per call (:data:`APPLY_CHUNK_ARGS`). A command that fails (a key of
another type) does not stop the others and the fence still moves, as in ``MULTI/EXEC``: a replay
must never count the rest twice; the failures come back and the batch fails loudly. A Lua error
among the writes (none is known: arguments are chunked, see SCRIPT_CHUNK) is caught the same way,
so no partial apply leaves the fence behind.
The reads come after the fence moved; a read Redis refuses is a failure too (its reply false)."""
READ_SCRIPT = READ_LUA + """
-- ARGV[1]: JSON [[command, arg, ...], ...]: reads only (a recovered batch's summaries published again).
local failed = {}
local replies = read_all(cjson.decode(ARGV[1]), failed)
return {failed, replies}
"""


class SummarySinkError(KappaError):
    """Redis refused or lost a summary write."""


class FenceMoved(SummarySinkError):
    """Another writer applied offsets of the same partitions between our read and our write."""


class ScriptOps:
    """The commands of an apply, gathered for :data:`APPLY_SCRIPT`: ``ops("HINCRBY", key, field, n)``.

    ``PFADD``s (``pfadd``, as :func:`add_members` calls it on a pipeline) are kept apart in
    ``members``: they are idempotent and go outside the fence.
    """

    def __init__(self) -> None:
        self.ops: list[list[str]] = []
        self.members: list[list[str]] = []

    def __call__(self, command: str, *args: object) -> None:
        """Add one command (arguments as Redis receives them: strings)."""
        self.ops.append([command, *map(str, args)])

    def pfadd(self, key: str, *values: str) -> None:
        """Add the member ids of one HyperLogLog."""
        self.members.append([key, *values])


class FencedApply:
    """:data:`APPLY_SCRIPT` registered on a client, for one fence hash."""

    def __init__(self, client: redis.Redis, fence_key: str, chunk_args: int = APPLY_CHUNK_ARGS) -> None:
        self.fence_key, self.chunk_args = fence_key, chunk_args
        self._script = client.register_script(APPLY_SCRIPT)
        self._read = client.register_script(READ_SCRIPT)

    def run(self, ops: ScriptOps, expected: Mapping[Partition, int], new_fence: Mapping[Partition, int],
            meta: Mapping[str, Any], *, prefix: str, reads: Sequence[Sequence[str]] = ()) -> list[Any]:
        """Make ``ops`` and move the fence to ``new_fence`` if it still holds ``expected``; then ``reads``.

        The writes go in chunks of about :data:`APPLY_CHUNK_ARGS` arguments, one script call each;
        the first checks the fence, the last moves it, and the fence hash tracks the chunks between
        (a crash between two chunks resumes at the next one). Returns the replies of ``reads``, in
        their order. Raises FenceMoved (nothing written) when another writer moved the fence,
        SummarySinkError when Redis refused a write or a read (the others made, the fence moved).
        """
        fence: dict[str, str] = {f"{t}:{p}": str(o) for (t, p), o in new_fence.items()}
        fence |= {key: str(meta[key]) for key in ("batch_id", "query") if key in meta}
        fence |= {f"{t}:{p}{STREAM_SUFFIX}": "" if stream_ms is None else str(stream_ms)
                  for (t, p), stream_ms in meta.get("stream_ms", {}).items() if (t, p) in new_fence}
        fence["updated_ms"] = str(int(time.time() * 1000))
        expect = [item for (t, p) in new_fence
                  for item in (f"{t}:{p}", str(expected[(t, p)]) if (t, p) in expected else "")]
        chunks = chunk_ops(ops.ops, self.chunk_args)
        inline = reads if len(reads) <= READ_CHUNK else ()
        marker = f"{meta.get('query')}/{meta.get('batch_id')}/{len(chunks)}/{self.chunk_args}"
        failed: list[str] = []
        replies: list[Any] = []
        for index, chunk in enumerate(chunks):
            last = index == len(chunks) - 1
            payload = _encode({"marker": marker, "chunk": index, "last": last, "expect": expect,
                               "fence": [x for kv in fence.items() for x in kv] if last else [],
                               "ops": chunk, "reads": inline if last else []})
            status, detail, *rest = self._script(keys=[self.fence_key], args=[payload])
            status = status.decode() if isinstance(status, bytes) else status
            if status == "moved":
                moved = {tp: int(detail[i + 1]) if detail[i + 1] else None for i in range(0, len(detail), 2)
                         if (tp := _partition(_text(detail[i]))) is not None}
                raise FenceMoved(f"the Redis fence moved while the batch was computed ({moved}); "
                                 "another query writes the same summaries: stop it")
            if status in ("busy", "order"):
                raise FenceMoved(f"the Redis fence holds another apply in progress ({status}: "
                                 f"{[_text(d) for d in detail]}, this one {marker} chunk {index}); "
                                 "another query writes the same summaries: stop it")
            failed += [_text(d) for d in detail]
            if last and rest:
                replies = rest[0]
        if failed:
            raise SummarySinkError(f"{len(failed)} Redis command(s) of batch {meta.get('batch_id')} failed "
                                   f"(the fence moved, the others applied), first: {failed[0]}; "
                                   f"another program writes keys under the prefix {prefix!r}: stop "
                                   "it, then rebuild the summaries (docs/runbooks/redis-lost.md)")
        if reads and not inline:
            return self.read(reads)
        return replies

    def read(self, reads: Sequence[Sequence[str]]) -> list[Any]:
        """The replies of ``reads`` alone, in the shape :meth:`run` gives them; raise if one is refused.

        In calls of :data:`READ_CHUNK` reads: a reader of Redis waits at most one of them.
        """
        replies: list[Any] = []
        for start in range(0, len(reads), READ_CHUNK):
            failed, part = self._read(keys=[], args=[_encode(list(reads[start:start + READ_CHUNK]))])
            if failed:
                raise SummarySinkError(f"{len(failed)} Redis read(s) failed, first: {failed[0]}; another "
                                       "program writes keys under the summaries' prefix: stop it, then "
                                       "rebuild the summaries (docs/runbooks/redis-lost.md)")
            replies += part
        return replies


def chunk_ops(ops: list[list[str]], budget: int) -> list[list[list[str]]]:
    """``ops`` cut in order into chunks of at most ``budget`` arguments (an op is never cut).

    The cut depends only on the ops, so a batch resumed from its pending file after a crash has
    the same chunks as its first attempt. A batch without ops still makes one (empty) chunk: it
    moves the fence.
    """
    chunks: list[list[list[str]]] = [[]]
    size = 0
    for op in ops:
        if chunks[-1] and size + len(op) > budget:
            chunks.append([])
            size = 0
        chunks[-1].append(op)
        size += len(op)
    return chunks


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


STREAM_SUFFIX = ":stream_ms"
"""Fence hash fields ``<topic>:<partition>:stream_ms``: the stream time at the partition's fence."""


def parse_fence(raw: Mapping[Any, Any]) -> dict[Partition, int]:
    """The fence hash as next offsets per topic-partition (its other fields left out)."""
    fence: dict[Partition, int] = {}
    for name, value in raw.items():
        tp = _partition(name)
        if tp is not None:
            fence[tp] = int(value)
    return fence


def parse_stream_points(raw: Mapping[Any, Any]) -> dict[Partition, dict[int, int | None]]:
    """The stream time the fence recorded at each partition's fenced offset (stream_time.py)."""
    fence = parse_fence(raw)
    points: dict[Partition, dict[int, int | None]] = {}
    for raw_name, raw_value in raw.items():
        name = raw_name.decode() if isinstance(raw_name, bytes) else raw_name
        if not name.endswith(STREAM_SUFFIX):
            continue
        tp = _partition(name.removesuffix(STREAM_SUFFIX))
        if tp is not None and tp in fence:
            value = raw_value.decode() if isinstance(raw_value, bytes) else raw_value
            points[tp] = {fence[tp]: int(value) if value else None}
    return points


def _partition(field: str) -> Partition | None:
    topic, sep, partition = field.rpartition(":")
    return (topic, int(partition)) if sep and partition.isdigit() else None
