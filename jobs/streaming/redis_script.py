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
-- KEYS[1]: the fence hash. ARGV[1]: JSON {"expect": [field, offset or "", ...],
-- "fence": [field, value, ...], "ops": [[command, arg, ...], ...], "reads": [[command, arg, ...], ...]}.
-- Redis runs a script alone: nothing else reads or writes between the check and the last write.
local batch = cjson.decode(ARGV[1])
local moved = {}
for i = 1, #batch.expect, 2 do
  local have = redis.call('HGET', KEYS[1], batch.expect[i]) or ''
  if have ~= batch.expect[i + 1] then
    moved[#moved + 1] = batch.expect[i]
    moved[#moved + 1] = have
  end
end
if #moved > 0 then return {'moved', moved} end
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
redis.call('HSET', KEYS[1], unpack(batch.fence))
return {'applied', failed, read_all(batch.reads, failed)}
"""
"""The fenced apply. A command that fails (a key of another type) does not stop the others and the
fence still moves, as in ``MULTI/EXEC``: a replay must never count the rest twice; the failures
come back and the batch fails loudly. A Lua error among the writes (none is known: arguments are
chunked, see SCRIPT_CHUNK) is caught the same way, so no partial apply leaves the fence behind.
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

    def __init__(self, client: redis.Redis, fence_key: str) -> None:
        self.fence_key = fence_key
        self._script = client.register_script(APPLY_SCRIPT)
        self._read = client.register_script(READ_SCRIPT)

    def run(self, ops: ScriptOps, expected: Mapping[Partition, int], new_fence: Mapping[Partition, int],
            meta: Mapping[str, Any], *, prefix: str, reads: Sequence[Sequence[str]] = ()) -> list[Any]:
        """Make ``ops`` and move the fence to ``new_fence`` if it still holds ``expected``; then ``reads``.

        Returns the replies of ``reads``, in their order. Raises FenceMoved (nothing written) when
        another writer moved the fence, SummarySinkError when Redis refused a write or a read (the
        others made, the fence moved).
        """
        fence: dict[str, str] = {f"{t}:{p}": str(o) for (t, p), o in new_fence.items()}
        fence |= {key: str(meta[key]) for key in ("batch_id", "query") if key in meta}
        fence |= {f"{t}:{p}{STREAM_SUFFIX}": "" if stream_ms is None else str(stream_ms)
                  for (t, p), stream_ms in meta.get("stream_ms", {}).items() if (t, p) in new_fence}
        fence["updated_ms"] = str(int(time.time() * 1000))
        expect = [item for (t, p) in new_fence
                  for item in (f"{t}:{p}", str(expected[(t, p)]) if (t, p) in expected else "")]
        payload = _encode({"expect": expect, "fence": [x for kv in fence.items() for x in kv],
                           "ops": ops.ops, "reads": reads})
        status, detail, *replies = self._script(keys=[self.fence_key], args=[payload])
        if status == "moved":
            moved = {tp: int(detail[i + 1]) if detail[i + 1] else None
                     for i in range(0, len(detail), 2) if (tp := _partition(detail[i])) is not None}
            raise FenceMoved(f"the Redis fence moved while the batch was computed ({moved}); "
                             "another query writes the same summaries: stop it")
        if detail:
            raise SummarySinkError(f"{len(detail)} Redis command(s) of batch {meta.get('batch_id')} failed "
                                   f"(the fence moved, the others applied), first: {detail[0]}; "
                                   f"another program writes keys under the prefix {prefix!r}: stop "
                                   "it, then rebuild the summaries (docs/runbooks/redis-lost.md)")
        return replies[0] if replies else []

    def read(self, reads: Sequence[Sequence[str]]) -> list[Any]:
        """The replies of ``reads`` alone, in the shape :meth:`run` gives them; raise if one is refused."""
        failed, replies = self._read(keys=[], args=[_encode(reads)])
        if failed:
            raise SummarySinkError(f"{len(failed)} Redis read(s) failed, first: {failed[0]}; another "
                                   "program writes keys under the summaries' prefix: stop it, then "
                                   "rebuild the summaries (docs/runbooks/redis-lost.md)")
        return replies


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
