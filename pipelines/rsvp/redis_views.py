"""The RSVP pipeline's Redis views: its key scheme, as the streaming job's fenced apply writes it.

Keys under the prefix (docs/streaming.md, "Redis keys"): ``cities:<start>`` (a hash of counts per
city per tumbling window), ``topics:minute:<start>`` (per-slide topic buckets), ``trending:<start>``
(each sliding window rebuilt as the union of its buckets), ``topics:all`` (all-time topic counts),
``members:<start>`` / ``members:all`` (HyperLogLogs of member ids, added by the tasks) and
``event:<id>`` (a hash of ``yes``, ``no``, ``guests`` and ``event_name`` per event). Every window
key expires after ``streaming.window_ttl_s`` and is indexed in ``<name>:windows``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.streaming.aggregates import MEMBERS_ADDED
from jobs.streaming.members import add_members
from jobs.streaming.redis_script import ApplyOps, Reads
from jobs.streaming.redis_sink import Keys, index_windows
from jobs.streaming.resp import EntityHash
from pipelines.rsvp.aggregates import param, windows_from
from pipelines.rsvp.summary_reads import SummaryReads

if TYPE_CHECKING:
    from jobs.config.load import KappaConfig

CITY, TOPIC_MINUTE, TOPIC, MEMBER, MEMBER_ALL, EVENT = (
    "city", "topic_minute", "topic", "member", "member_all", "event")
MEMBERS = "members"
"""The name of the member ids' HyperLogLogs (``members:<start>``, ``members:all``)."""
EVENT_SUMS = ("yes", "no", "guests")
"""The event hash's fields of an ``event`` row's sums ``n``, ``n2``, ``n3``."""


@dataclass
class Applied:
    """What an apply changed: the keys to read back and publish to the summaries topic."""

    keys: Keys
    cities: set[tuple[int, str]] = field(default_factory=set)
    trending: set[int] = field(default_factory=set)
    members: set[int] = field(default_factory=set)
    events: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))
    """The ids of the events changed, in the order of their writes."""
    topics: bool = False
    entity: EntityHash | None = None
    asked: SummaryReads | None = None
    """The reads last made (:meth:`reads`), which :meth:`records` answers."""

    def reads(self, windows_ms: dict[str, int], top_n: int) -> Reads:
        """The reads of every value changed."""
        self.asked = SummaryReads(self.keys, self, windows_ms, top_n)
        return self.asked.reads

    def records(self, replies: list[Any]) -> list[dict[str, Any]]:
        """The summary records of the replies to :meth:`reads`."""
        assert self.asked is not None, "records() answers the reads() made before it"
        return self.asked.records(replies)


class RsvpViews:
    """The RSVP increments' writes (the codec's ``views``, :class:`jobs.streaming.codec.RedisViews`)."""

    def __init__(self, cfg: KappaConfig, keys: Keys) -> None:
        windows = windows_from(cfg)
        self.keys, self.window_ttl = keys, cfg.streaming.window_ttl_s
        self.slide_ms = windows.trending_slide_ms
        self.trending_steps = windows.trending_ms // windows.trending_slide_ms
        self.entity = EntityHash(EVENT, keys("event", ""), param(cfg, "event_ttl_s"), EVENT_SUMS,
                                 "event_name")

    def write(self, ops: ApplyOps, increments: pa.Table, entities: pa.Array) -> Applied:
        """The writes of every row but the events' (those are ``op.events``, written by the apply)."""
        keys, op = self.keys, ops
        applied = Applied(keys, events=entities, entity=self.entity)
        members: dict[int, list[str]] = defaultdict(list)
        windows: dict[str, set[int]] = defaultdict(set)
        for row in increments.to_pylist():
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
                windows[MEMBERS].add(start)
        add_members(op, keys, members, MEMBERS)
        for start in members:
            if start >= 0:
                applied.members.add(start)
                windows[MEMBERS].add(start)
        self._trending(op, windows["topics:minute"], applied, windows)
        index_windows(op, keys, windows, self.window_ttl)
        return applied

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
