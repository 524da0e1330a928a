"""Offset arithmetic of the Kafka source: pure functions, no Kafka client, unit-tested.

Offsets are ``{(topic, partition): next offset to read}``; in the Spark checkpoint they are the
JVM connector's JSON ``{"topic":{"0":23}}``. A range ``[start, end)`` of one topic-partition is
one Spark input partition (split further only with minPartitions/maxRecordsPerPartition, like
KafkaOffsetRangeCalculator.scala).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from jobs.errors import KafkaSourceError
from jobs.kafka.dataloss import DataLoss

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Records ``[start, end)`` of one topic-partition: one Spark input partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        """Number of offsets in the range (records, unless compaction or transactions left gaps)."""
        return max(0, self.end - self.start)

    def as_row(self, continued: bool = False, resumes: bool = False) -> tuple[str, int, int, int, bool, bool]:
        """The range as a row of the ``emitRanges`` schema: topic, partition, start, end, the two marks."""
        return self.topic, self.partition, self.start, self.end, continued, resumes


@dataclass(frozen=True)
class RangeGroup(InputPartition):
    """Several ranges read by one task (``emitRanges`` with ``rangeGroups``)."""

    ranges: tuple[OffsetRange, ...]
    continued: frozenset[int] = frozenset()
    """Indexes in ``ranges`` of the pieces whose partition the next group reads on from their end."""
    resumes: frozenset[int] = frozenset()
    """Indexes in ``ranges`` of the pieces that start at a cut: the previous group reads their
    partition up to their start (and spills what its fetch brought past it)."""

    def rows(self) -> list[tuple[str, int, int, int, bool, bool]]:
        """The group as rows of the ``emitRanges`` schema."""
        return [rng.as_row(index in self.continued, index in self.resumes)
                for index, rng in enumerate(self.ranges)]


def group_ranges(ranges: list[OffsetRange], groups: int, *, allow_cuts: bool = True) -> list[RangeGroup]:
    """The ranges as at most ``groups`` groups of equal record counts (within one record).

    Ranges are taken in order and cut where a group is full, so a topic-partition is split across
    at most two neighbouring groups per cut: with 3 equal partitions and 2 groups, each group holds
    one and a half partitions. The piece before a cut is marked ``continued``: the next group's
    task reads on from its end.

    Within a group, the piece before a cut comes first and the piece after a cut last: a broker
    answers the first piece's fetch with records past the cut too (the embedded one with the whole
    rest of the partition), its reader spills them (the fetch spill), and the task of the piece
    after the cut, coming to it last, finds it there instead of fetching the partition again
    (docs/kafka-source.md, "rangeGroups"). Empty ranges are dropped; no group is empty.

    With ``allow_cuts`` false no range is cut: each goes whole to the group with the fewest records so
    far, largest first (:func:`whole_groups`).
    """
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    if not ranges or groups <= 1:
        return [RangeGroup(tuple(ranges))] if ranges else []
    if not allow_cuts:
        return whole_groups(ranges, groups)
    built: list[tuple[list[OffsetRange], int | None, bool]] = []  # ranges, the cut piece, starts after a cut
    current: list[OffsetRange] = []
    filled, index, after_cut = 0, 0, False
    target = _share(total, groups, 0)
    for rng in ranges:
        start = rng.start
        while start < rng.end:
            take = min(rng.end - start, target - filled)
            current.append(OffsetRange(rng.topic, rng.partition, start, start + take))
            start, filled = start + take, filled + take
            if filled == target and index < groups - 1:
                cut = len(current) - 1 if start < rng.end else None
                built.append((current, cut, after_cut))
                current, filled, index, after_cut = [], 0, index + 1, cut is not None
                target = _share(total, groups, index)
    if current:
        built.append((current, None, after_cut))
    return [_ordered(group, cut, after_cut) for group, cut, after_cut in built if group]


def whole_groups(ranges: list[OffsetRange], groups: int) -> list[RangeGroup]:
    """Whole ranges in at most ``groups`` groups, each to the least filled one, largest first."""
    filled: list[tuple[int, list[OffsetRange]]] = [(0, []) for _ in range(min(groups, len(ranges)))]
    for rng in sorted(ranges, key=lambda r: (-r.size, r.topic, r.partition, r.start)):
        index = min(range(len(filled)), key=lambda i: (filled[i][0], i))
        size, members = filled[index]
        filled[index] = (size + rng.size, [*members, rng])
    return [RangeGroup(tuple(sorted(members, key=lambda r: (r.topic, r.partition, r.start))))
            for _, members in filled if members]


def _ordered(ranges: list[OffsetRange], cut: int | None, after_cut: bool) -> RangeGroup:
    """A group with its piece before a cut (``cut``) first and its piece after one (index 0) last."""
    last = 0 if after_cut and cut != 0 else None
    order = sorted(range(len(ranges)), key=lambda i: 0 if i == cut else 2 if i == last else 1)
    return RangeGroup(tuple(ranges[i] for i in order),
                      frozenset() if cut is None else frozenset({order.index(cut)}),
                      frozenset({order.index(0)}) if after_cut else frozenset())


def _share(total: int, groups: int, index: int) -> int:
    """Records of group ``index`` when ``total`` is shared by ``groups`` (the first ones get the rest)."""
    return total // groups + (1 if index < total % groups else 0)


def to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """Offsets as the checkpoint JSON of Spark's Kafka source, topics and partitions sorted."""
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = int(offset)
    return result


def from_json(data: Mapping[str, Mapping[str, int]]) -> Offsets:
    """Parse checkpoint JSON back into offsets; raise KafkaSourceError on a foreign shape."""
    try:
        return {(topic, int(partition)): int(offset)
                for topic, partitions in data.items() for partition, offset in partitions.items()}
    except (AttributeError, TypeError, ValueError):
        raise KafkaSourceError(
            f"checkpointed offset {dict(data)!r} is not Kafka source offsets JSON "
            '{"topic":{"0":23}}; the checkpoint belongs to another source: use a new checkpoint'
        ) from None


def rate_limit(limit: int, begin: Mapping[TopicPartitionKey, int],
               until: Mapping[TopicPartitionKey, int]) -> Offsets:
    """Spread at most ``limit`` records over the partitions in proportion to their backlog.

    As KafkaMicroBatchStream.rateLimit, a partition's share is floored, but a share below one
    record is rounded up so small partitions are not starved. Unlike it, the records the floors
    leave over go one each to the partitions with the largest remainders, so a trigger reads the
    whole limit: 100,000 over three equal backlogs is 33,334 + 33,333 + 33,333, not 99,999,
    which would leave 3 records to a micro-batch of their own at the end of a replay.

    Args:
        limit: maxOffsetsPerTrigger.
        begin: where each partition of ``until`` starts (checkpoint, or earliest for new ones).
        until: the latest available offsets.
    """
    sizes = {tp: end - begin[tp] for tp, end in until.items() if tp in begin and end > begin[tp]}
    total = sum(sizes.values())
    if total < 1:
        return dict(until)
    if total <= limit:
        return dict(until)
    shares = {tp: limit * (size / total) for tp, size in sizes.items()}
    records = {tp: math.ceil(share) if share < 1 else math.floor(share) for tp, share in shares.items()}
    left = limit - sum(records.values())
    by_remainder = sorted((tp for tp in sizes if records[tp] < sizes[tp]),
                          key=lambda tp: shares[tp] - records[tp], reverse=True)
    for tp in by_remainder[:max(left, 0)]:
        records[tp] += 1
    return {tp: begin[tp] + min(sizes[tp], records[tp]) if tp in sizes else end for tp, end in until.items()}


def plan_ranges(start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int],
                earliest: Mapping[TopicPartitionKey, int]) -> tuple[list[OffsetRange], list[DataLoss]]:
    """Ranges to read for one batch, and the data loss found on the way.

    Like KafkaOffsetReaderAdmin.getOffsetRangesFromResolvedOffsets, plus a check of each start
    against the log start offset: a start below it means records were deleted (retention or
    DeleteRecords) before they were read; the range then starts at the earliest available offset.

    Args:
        start: offsets the batch starts from (the previous batch's end).
        end: offsets the batch ends at (exclusive).
        earliest: the log start offset of each partition in ``end``.
    """
    losses = [DataLoss("partition_gone", topic, partition, requested=offset)
              for (topic, partition), offset in sorted(start.items()) if (topic, partition) not in end]
    ranges: list[OffsetRange] = []
    for (topic, partition), stop in sorted(end.items()):
        low = earliest.get((topic, partition))
        first = start.get((topic, partition))
        if first is None:
            first = low if low is not None else 0
            if first > 0:
                losses.append(DataLoss("new_partition", topic, partition, requested=0,
                                       earliest=first, skipped=min(first, stop)))
        if stop < first:
            losses.append(DataLoss("offset_reset", topic, partition, requested=first, earliest=stop))
            continue
        if low is not None and first < low:
            losses.append(DataLoss("deleted", topic, partition, requested=first, earliest=low,
                                   skipped=min(low, stop) - first))
            first = min(low, stop)
        if first < stop:
            ranges.append(OffsetRange(topic, partition, first, stop))
    return ranges, losses


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None,
                 max_records: int | None) -> list[OffsetRange]:
    """Split large ranges into more Spark tasks (minPartitions / maxRecordsPerPartition).

    Follows KafkaOffsetRangeCalculator.getRanges: without either option, or when there are
    already at least ``min_partitions`` ranges and no record cap, ranges are kept whole.
    """
    ranges = [r for r in ranges if r.size > 0]
    enough = min_partitions is None or len(ranges) >= min_partitions
    if enough and max_records is None:
        return ranges
    total = sum(r.size for r in ranges)
    result: list[OffsetRange] = []
    for rng in ranges:
        parts = 1
        if not enough and min_partitions:
            parts = max(round(rng.size / total * min_partitions), 1)
        if max_records:
            parts = max(parts, math.ceil(rng.size / max_records))
        remaining, first = rng.size, rng.start
        for index in range(parts):
            count = remaining // (parts - index)
            remaining -= count
            last = min(first + count, rng.end)
            result.append(OffsetRange(rng.topic, rng.partition, first, last))
            first = last
    return [r for r in result if r.size > 0]


def cap(latest: Mapping[TopicPartitionKey, int], bound: Mapping[TopicPartitionKey, int] | None,
        start: Mapping[TopicPartitionKey, int]) -> Offsets:
    """Latest offsets limited to an ending bound; never below where a partition already is."""
    if bound is None:
        return dict(latest)
    capped: Offsets = {}
    for tp, offset in latest.items():
        if tp in bound:
            capped[tp] = max(min(offset, bound[tp]), start.get(tp, 0))
        elif tp in start:
            capped[tp] = start[tp]
    return capped


def behind(latest: Mapping[TopicPartitionKey, int], current: Mapping[TopicPartitionKey, int]) -> int:
    """Records between ``current`` and ``latest`` over all partitions (the query's lag)."""
    return sum(max(0, offset - current.get(tp, offset)) for tp, offset in latest.items())
