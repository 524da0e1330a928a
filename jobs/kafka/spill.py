"""Executor-side spill of records a streaming read fetched past its range (the fetch spill).

:class:`FetchSpill` is the folder's rules (no Kafka client, unit-tested on a temporary folder);
:func:`fetch_spill` builds it from the source options and :func:`spill_surplus` fills it from a
leased consumer at the end of a range read (jobs/kafka/consumer.py).

A broker may answer a fetch with far more than the range needs: the embedded one returns the rest
of the partition on every fetch, and a real one up to ``fetch.max.bytes``. The consumer pool keeps
such records for the next micro-batch only in the Python worker that fetched them, but Spark
hands the partition's next task to whichever Python worker is idle, so the next range usually
lands in another worker and fetches it all again. The spill makes the surplus visible to every
worker of the executor: at the end of a clean range read, the records fetched past its end are
written as one Arrow IPC file per (client properties, topic, partition, offset span) to a local
folder, and the next read of that partition, in any worker, serves its range from the file
(memory-mapped, no conversion) before it fetches the rest from Kafka.

Files are immutable and written atomically (temporary name, then rename), so concurrent workers
never see half a file. A file is removed once reads have consumed all of its span, when it is
older than ``ttl_s``, and oldest first while the folder holds more than ``max_bytes``. What reads
consumed is kept beside the file, one empty marker per read (``<file>.read~<start>~<end>``): the
tasks of one micro-batch read consecutive pieces of a partition in any order, so neither the read
that reaches a file's end nor one that starts past it (or spills past it) can tell that no other
piece still needs the file. Removed at such a point, the file made the other piece fetch the rest
of the partition again (the third micro-batch of the benchmark's replay took 1.7-2.6 s instead of
1.1-1.4 s; docs/explanation/streaming-performance.md). A record served from a file is the record
Kafka returned at that offset, so the effect on a read is only what it fetches, never what it
yields (the offsets of a partition never change meaning, except when a topic is deleted and
re-created: the short TTL bounds that window; docs/kafka-source.md).

The folder is a local cache of one executor, not job state: nothing resumes from it, and a lost
folder only makes the next reads fetch their records from Kafka again, so it stays on local disk
rather than beside the checkpoint (jobs/lake/statefs.py).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from jobs.kafka.arrow import to_record_batch
from jobs.kafka.offsets import OffsetRange
from jobs.kafka.options import SourceOptions
from jobs.kafka.pool import Lease

if TYPE_CHECKING:
    from confluent_kafka import Consumer

logger = logging.getLogger(__name__)

SUFFIX = ".arrow"
READ = ".read"
"""A consumed span's marker: ``<file name>.read~<start>~<end>``, empty."""
SEP = "~"  # never in a Kafka topic name ([a-zA-Z0-9._-])
DEFAULT_MAX_BYTES = 1024 * 2**20
DEFAULT_TTL_S = 120.0
CHUNK_ROWS = 5_000
"""Records taken from librdkafka's queue, converted and written per step of :func:`spill_surplus`.

Each step holds its records twice (the consumed messages and their Arrow batch) on top of what
librdkafka still holds of the fetch; 5,000 records of the reference workload are about 6 MB a
copy, where the 20,000 of a read batch are 22 MB: steps of 5,000 keep a first-batch task's peak
RSS 40-64 MB lower (docs/explanation/streaming-performance.md).
Reads of the file get batches of up to this size."""


@dataclass(frozen=True)
class SpillFile:
    """One spilled span ``[start, end)`` of a partition."""

    path: Path
    start: int
    end: int


def default_folder() -> Path:
    """The executor's local folder: the first of ``SPARK_LOCAL_DIRS``, else the temp folder."""
    local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    base = Path(local) if local else Path(tempfile.gettempdir())
    return base / f"kappa-kafka-spill-{os.getuid()}"


class FetchSpill:
    """The spill folder of one executor, shared by its Python workers."""

    def __init__(self, folder: Path, *, max_bytes: int = DEFAULT_MAX_BYTES, ttl_s: float = DEFAULT_TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.folder, self.max_bytes, self.ttl_s, self._clock = folder, max_bytes, ttl_s, clock

    def read(self, key: str, start: int, end: int, max_rows: int) -> tuple[list[pa.RecordBatch], int]:
        """Batches of the records in ``[start, end)`` a spill file holds, and the offset reached.

        The offset reached is ``start`` when no file covers ``start``; otherwise the smaller of
        ``end`` and the file's end (records inside it that are absent did not exist in Kafka).
        """
        self._expire()
        found = [f for f in self._files(key) if f.start <= start < f.end]
        if not found:
            return [], start
        spill = max(found, key=lambda f: f.end)
        try:
            table = pa.ipc.open_file(pa.memory_map(str(spill.path))).read_all()
        except (FileNotFoundError, pa.ArrowInvalid) as exc:  # evicted meanwhile, or unreadable
            logger.debug("kafka spill unreadable path=%s error=%s", spill.path, exc)
            return [], start
        offsets = table.column("offset").to_numpy()
        first, last = np.searchsorted(offsets, [start, end])
        reached = min(end, spill.end)
        rows = table.slice(int(first), int(last - first))
        self._consumed(spill, start, reached)
        return rows.to_batches(max_chunksize=max_rows), reached

    def write(self, key: str, start: int, batches: Iterable[pa.RecordBatch]) -> int | None:
        """Spill consecutive records fetched from ``start`` on, batch by batch as they come.

        Returns the offset after the last record written (None: there was none). The caller
        bounds what it passes (``max_bytes`` is the folder's budget, enforced by eviction).
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".tmp-{uuid.uuid4().hex}"
        end: int | None = None
        try:
            with pa.OSFile(str(tmp), "wb") as sink:
                writer: pa.ipc.RecordBatchFileWriter | None = None
                for batch in batches:
                    if not batch.num_rows:
                        continue
                    if writer is None:
                        writer = pa.ipc.new_file(sink, batch.schema)
                    writer.write_batch(batch)
                    end = int(batch.column("offset")[-1].as_py()) + 1
                if writer is not None:
                    writer.close()
        except BaseException:
            _unlink(tmp)
            raise
        if end is None:
            _unlink(tmp)
            return None
        path = self.folder / f"{key}{SEP}{start}{SEP}{end}{SUFFIX}"
        for marker in self._markers(path):  # of an earlier file of this name (a replay of the span)
            _unlink(marker)
        os.replace(tmp, path)
        self._expire()
        return end

    def _consumed(self, spill: SpillFile, start: int, end: int) -> None:
        """Mark ``[start, end)`` of ``spill`` read; remove the file once its whole span is.

        Every read marks before it looks, so of two reads finishing together the later one sees
        both marks: a file whose span is covered is always removed.
        """
        if end <= start:
            return
        try:
            (self.folder / f"{spill.path.name}{READ}{SEP}{start}{SEP}{end}").touch()
        except OSError as exc:  # the TTL or the budget still bound the folder
            logger.debug("kafka spill marker not written path=%s error=%s", spill.path, exc)
            return
        spans = sorted(_span(marker.name) for marker in self._markers(spill.path))
        covered = spill.start
        for lo, hi in spans:
            if lo > covered:
                return
            covered = max(covered, hi)
        if covered >= spill.end:
            self._remove(spill.path)

    def _markers(self, path: Path) -> list[Path]:
        """The read markers of the spill file at ``path``."""
        prefix = f"{path.name}{READ}{SEP}"
        try:
            return [self.folder / name for name in os.listdir(self.folder) if name.startswith(prefix)]
        except FileNotFoundError:
            return []

    def _remove(self, path: Path) -> None:
        """A spill file and its read markers."""
        _unlink(path)
        for marker in self._markers(path):
            _unlink(marker)

    def _files(self, key: str) -> list[SpillFile]:
        prefix = key + SEP
        found = []
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        for name in names:
            if name.startswith(prefix) and name.endswith(SUFFIX):
                start, end = name[len(prefix):-len(SUFFIX)].split(SEP)
                found.append(SpillFile(self.folder / name, int(start), int(end)))
        return found

    def _expire(self) -> None:
        """Drop files past the TTL, then the oldest while the folder is over its budget."""
        now = self._clock()
        files = []
        try:
            entries = list(os.scandir(self.folder))
        except FileNotFoundError:
            return
        for entry in entries:
            if not entry.is_file():
                continue
            try:
                stat = entry.stat()
            except FileNotFoundError:
                continue
            if now - stat.st_mtime > self.ttl_s:
                _unlink(Path(entry.path))
            elif entry.name.endswith(SUFFIX):
                files.append((stat.st_mtime, stat.st_size, Path(entry.path)))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            self._remove(path)
            total -= size


def fetch_spill(options: SourceOptions) -> FetchSpill | None:
    """The executor's fetch spill as the options configure it (None: ``fetchSpill.maxBytes=0``)."""
    if options.fetch_spill_max_bytes <= 0:
        return None
    folder = Path(options.fetch_spill_dir) if options.fetch_spill_dir else default_folder()
    return FetchSpill(folder, max_bytes=options.fetch_spill_max_bytes,
                      ttl_s=options.fetch_spill_ttl_ms / 1000)


def spill_surplus(lease: Lease[Consumer], rng: OffsetRange, spilled: FetchSpill, skey: str,
                  *, schema: pa.Schema, chunk_rows: int) -> None:
    """Spill what was fetched past the range: held back, plus what librdkafka has queued.

    The pause that follows drops librdkafka's queue, so records are taken out of it first, a
    chunk at a time straight into the spill file (up to the spill's budget); the consumer then
    stands after the last record taken, and a next range that starts before it gets a seek.
    """

    def surplus() -> Iterator[pa.RecordBatch]:
        # the budget counts the Arrow bytes written: asking each message for its value to count
        # it would copy every value a second time (5-10 % of a spill's time, measured)
        budget = spilled.max_bytes
        pending = lease.pending
        for i in range(0, len(pending), chunk_rows):
            batch = to_record_batch(pending[i:i + chunk_rows], rng.topic, rng.partition, schema)
            budget -= batch.nbytes
            yield batch
        while budget > 0:
            messages = lease.consumer.consume(chunk_rows, timeout=0)
            data = [m for m in messages if m.error() is None]
            if data:
                batch = to_record_batch(data, rng.topic, rng.partition, schema)
                budget -= batch.nbytes
                yield batch
            if len(data) < len(messages) or not messages:
                return

    end = spilled.write(skey, rng.end, surplus())
    if end is not None:
        lease.position, lease.pending = end, []


def spill_key(pool_digest: str, topic: str, partition: int, include_headers: bool) -> str:
    """The file-name prefix of a partition's spills under one set of client properties."""
    return SEP.join((pool_digest + ("h" if include_headers else "n"), topic, str(partition)))


def _span(marker: str) -> tuple[int, int]:
    """The ``(start, end)`` of a read marker's name."""
    start, end = marker.rsplit(SEP, 2)[1:]
    return int(start), int(end)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
