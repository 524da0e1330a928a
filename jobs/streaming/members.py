"""The distinct items' HyperLogLogs: ``PFADD``s outside the fence (docs/streaming.md, "Redis keys").

Adding an item twice changes nothing, so the adds need no fence; a batch that counted against a
fence checks it is still there after its adds and removes them when Redis lost the view
(:func:`pfadd_fenced`, docs/runbooks/redis-lost.md). The HyperLogLogs are
``<prefix>:<name>:<window start>`` and ``<prefix>:<name>:all``, ``name`` the codec's ``distinct``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis

    from jobs.streaming.redis_sink import Keys

PFADD_CHUNK = 5000


def add_members(pipe, keys: Keys, members: Mapping[int, Sequence[str]], name: str) -> None:
    """PFADD distinct items by window start (-1: the all-time set) on a pipeline, to ``<name>:<start>``.

    Adding an item to a HyperLogLog twice changes nothing, so these writes need no fence: the
    tasks of a batch add their items themselves (jobs/streaming/task.py) and a replayed batch
    adds the same items again without effect (docs/streaming.md, "Redis keys").
    """
    for start, ids in members.items():
        key = keys(name, "all") if start < 0 else keys(name, start)
        for chunk in range(0, len(ids), PFADD_CHUNK):
            pipe.pfadd(key, *ids[chunk:chunk + PFADD_CHUNK])


class MemberAdds(list):
    """The ``PFADD``s :func:`add_members` makes, collected as ``[key, *ids]`` lists."""

    def pfadd(self, key: str, *ids: str) -> None:
        """Collect one ``PFADD``."""
        self.append([key, *ids])


def write_members(client: redis.Redis, keys: Keys, members: Mapping[int, Sequence[str]], name: str, *,
                  fenced: bool) -> None:
    """:func:`add_members` on one pipeline; ``fenced``: the fence hash is known to exist (pfadd_fenced)."""
    adds = MemberAdds()
    add_members(adds, keys, members, name)
    pfadd_fenced(client, adds, keys.fence if fenced else None)


def pfadd_fenced(client: redis.Redis, adds: Sequence[Sequence[str]], fence: str | None) -> None:
    """Each ``[key, *ids]`` of ``adds`` as a ``PFADD`` on one pipeline; with ``fence``, then its ``EXISTS``.

    ``fence``: a hash that existed before (the batch counted against it). When it is gone after
    the adds (Redis lost the view), the keys they wrote are deleted, so a Redis that lost the view
    keeps no member ids of the batch that finds the loss. One connection's commands run in order:
    a loss before the ``EXISTS`` is seen, and one after it removed the adds too.
    """
    if not adds:
        return
    with client.pipeline(transaction=False) as pipe:
        for key, *ids in adds:
            pipe.pfadd(key, *ids)
        if fence is not None:
            pipe.exists(fence)
        replies = pipe.execute()
    if fence is not None and not replies[-1]:
        client.delete(*sorted({add[0] for add in adds}))
