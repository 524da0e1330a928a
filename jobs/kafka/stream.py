"""Streaming side of the ``kafka-py`` source (KafkaMicroBatchStream.scala in Python).

Offsets are the JVM connector's checkpoint JSON ``{"topic":{"0":23}}``: the end offset of every
planned batch is written to the query's offset log before the batch runs, so a restarted query
replays exactly the batch that was not committed and resumes after the last committed one.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from jobs.kafka import dataloss
from jobs.kafka.client import OffsetReader
from jobs.kafka.consumer import read_range
from jobs.kafka.groups import GroupCommitter
from jobs.kafka.offsets import (
    OffsetRange,
    Offsets,
    RangeGroup,
    behind,
    cap,
    from_json,
    group_ranges,
    plan_ranges,
    rate_limit,
    split_ranges,
    to_json,
)
from jobs.kafka.options import SourceOptions
from jobs.lake import statefs

logger = logging.getLogger(__name__)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches of offset ranges; honours maxOffsetsPerTrigger and availableNow.

    One instance lives on the driver for the life of a query (in Spark's Python streaming
    runner); ``read`` runs on executors from a separate copy, so it only uses the partition.
    """

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._offsets: OffsetReader | None = None
        self._committer: GroupCommitter | None = None
        self._available_now = False
        self._target: Offsets | None = None
        self._ending: Offsets | None = None
        self._latest: Offsets | None = None

    @property
    def offsets(self) -> OffsetReader:
        """The driver's offset reader, created on first use."""
        if self._offsets is None:
            self._offsets = OffsetReader(self._options)
        return self._offsets

    def initialOffset(self) -> dict:
        """Where a new query starts: startingOffsets/Timestamp resolved now (or from the file).

        The file (``initialOffsetsFile``, a local path or an S3 URI) is created only if absent:
        the first resolution wins, so a query restarted before its first commit, on this host or
        another, starts where it first meant to.
        """
        name = self._options.initial_offsets_file
        path = statefs.location(name) if name else None
        saved = _read_json(path) if path is not None else None
        if saved is not None:
            logger.info("kafka initial offsets from %s offsets=%s", path, saved)
            return saved
        tps = self.offsets.topic_partitions()
        start = to_json(self.offsets.resolve(self._options.starting, tps, starting=True))
        if path is not None and not statefs.create(path, json.dumps(start).encode()):
            start = json.loads(statefs.read(path))   # another driver resolved it first
        logger.info("kafka initial offsets source=%s starting=%s offsets=%s",
                    self._options.describe(), self._options.starting.kind, start)
        return start

    def getDefaultReadLimit(self) -> ReadLimit:
        """The read limit: ReadMaxRows(maxOffsetsPerTrigger), else everything available."""
        limit = self._options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target at the first latestOffset call; later data waits for the next run."""
        self._available_now = True

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end offset of the next batch: latest (or target), capped by the read limit."""
        began = time.monotonic()
        current = from_json(start)
        latest = self._latest_target(current)
        self._latest = latest
        if isinstance(limit, ReadMaxRows):
            begin = self._begin(current, latest)
            end = rate_limit(limit.max_rows, begin, latest)
        else:
            end = latest
        logger.debug("kafka latest offset behind=%d planned=%d limit=%s elapsed_s=%.3f",
                     behind(latest, current), behind(end, current), limit, time.monotonic() - began)
        return to_json(end)

    def reportLatestOffset(self) -> dict | None:
        """The latest offsets seen at the last trigger (shown in the query progress)."""
        return to_json(self._latest) if self._latest else None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """One range per topic-partition between two checkpointed offsets; checks data loss."""
        first, last = from_json(start), from_json(end)
        if first == last:
            return []
        options = self._options
        earliest = self.offsets.earliest(last)
        ranges, losses = plan_ranges(first, last, earliest)
        dataloss.report(losses, fail=options.fail_on_data_loss, ledger_dir=options.data_loss_dir)
        planned = split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
        logger.debug("kafka batch plan ranges=%d rows=%d lost=%d", len(planned),
                     sum(r.size for r in planned), sum(loss.skipped or 0 for loss in losses))
        if options.emit_ranges and options.range_groups:
            return list(group_ranges(planned, options.range_groups, allow_cuts=options.range_cuts))
        return list(planned)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range on an executor (with ``emitRanges``: the range itself, one row)."""
        if isinstance(partition, RangeGroup):  # emitRanges with rangeGroups: a row per range
            return iter(partition.rows())
        assert isinstance(partition, OffsetRange)
        if self._options.emit_ranges:
            return iter([partition.as_row()])
        return read_range(partition, self._options, spill=True)

    def commit(self, end: dict) -> None:
        """Spark committed every batch up to ``end``: mirror it to commitOffsetsToGroup."""
        if self._options.commit_group:
            if self._committer is None:
                self._committer = GroupCommitter(self._options.kafka, self._options.commit_group)
            self._committer.commit(from_json(end))

    def stop(self) -> None:
        """Release the driver's clients."""
        if self._offsets is not None:
            self._offsets.close()
        if self._committer is not None:
            self._committer.close()

    def _latest_target(self, current: Offsets) -> Offsets:
        if self._available_now and self._target is not None:
            return self._target
        tps = self.offsets.topic_partitions()
        latest = cap(self.offsets.latest(tps), self._ending_offsets(tps), current)
        if self._available_now:
            self._target = latest
            logger.info("kafka availableNow target offsets=%s", to_json(latest))
        return latest

    def _ending_offsets(self, tps: list[tuple[str, int]]) -> Offsets | None:
        ending = self._options.ending
        if ending is None or ending.kind == "latest":
            return None
        if self._ending is None:
            self._ending = self.offsets.resolve(ending, tps, starting=False)
            logger.info("kafka stream ends at offsets=%s", to_json(self._ending))
        return self._ending

    def _begin(self, current: Offsets, latest: Offsets) -> Offsets:
        """Where each partition's backlog starts: checkpoint, earliest for new or trimmed ones."""
        earliest = self.offsets.earliest(latest)
        return {tp: max(current.get(tp, earliest.get(tp, 0)), earliest.get(tp, 0)) for tp in latest}


def _read_json(path: statefs.Location) -> dict | None:
    try:
        return json.loads(statefs.read(path))
    except FileNotFoundError:
        return None
