"""A streaming query's state beside its Spark checkpoint: stream time, fingerprint, lock.

Layout for query ``q`` under ``lake.checkpoint_root`` (a local path or an S3 URI; every file
goes through jobs/lake/statefs.py, so a driver on another host finds it):

- ``q/``                      Spark's checkpoint (offsets, commits, sources)
- ``q/kappa-state/stream-time.json``  the stream time at each partition's offsets after the last
  batches, so the next batch (or one replayed after a crash) continues it (stream_time.py)
- ``q/kappa-state/pending-apply.json``  the Redis effects of the last batch while they are applied
  in the background (``streaming.apply_in_background``): applied at the next start if the job
  stopped first (jobs/streaming/applier.py)
- ``q/kafka-py/``             the Kafka source's initial offsets and data-loss ledger
- ``q.fingerprint.json``      what the checkpoint was built for (source topics, stateful shape)
- ``q.lock``                  held (flock) by the running job on this host: never two copies of
  one query here (on an S3 root the lock file is local, see :func:`lock_file`; the lease in
  jobs/streaming/lease.py guards the query across hosts)
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from jobs.errors import KappaError
from jobs.host.locks import LockHeld, exclusive_lock
from jobs.lake import statefs
from jobs.lake.statefs import Location

STATE_FORMAT = "kappa-streaming-state/1"


class CheckpointError(KappaError):
    """A checkpoint cannot be used as it is; the message names the recovery options."""


class AlreadyRunning(KappaError):
    """Another process runs the same query."""

    exit_code = 3


@dataclass(frozen=True)
class BatchWatermark:
    """A batch's event-time watermark for its metrics (None before any event) and its max event time."""

    watermark_ms: int | None
    max_event_ms: int | None


def checkpoint_path(root: str, query: str) -> Location:
    """The Spark checkpoint folder of a query (named from the query, STYLE.md 13).

    A local root gives a ``Path``; an S3 root (``s3://bucket/prefix``) an ``ObjectPath``, whose
    ``str`` is the URI Spark's ``checkpointLocation`` takes.
    """
    return statefs.location(root) / query


class _BatchIdOnly(msgspec.Struct):
    """The one field of a pending effects file that :meth:`PendingApplyFile.clear` reads."""

    batch_id: int | None = None


_decode_batch_id = msgspec.json.Decoder(_BatchIdOnly).decode


class _ExpectedOnly(msgspec.Struct):
    """The field of a pending effects file that :meth:`PendingApplyFile.expects_fence` reads."""

    expected: list[Any] = []


_decode_expected = msgspec.json.Decoder(_ExpectedOnly).decode


class PendingApplyFile:
    """``<checkpoint>/kappa-state/pending-apply.json``: one batch's Redis effects until applied."""

    NAME = "pending-apply.json"

    def __init__(self, checkpoint: Location) -> None:
        self.path = checkpoint / "kappa-state" / self.NAME

    def write(self, data: dict[str, Any]) -> None:
        """Durably replace the file (locally fsync, then rename): a crash leaves the old or the new one."""
        write_json(self.path, data)

    def read(self) -> dict[str, Any] | None:
        """The pending effects, or None when every batch's effects were applied."""
        try:
            return json.loads(statefs.read(self.path))
        except FileNotFoundError:
            return None

    def clear(self, batch_id: int) -> None:
        """Remove the file once ``batch_id``'s effects are applied (a newer batch's stays).

        Only the file's ``batch_id`` is decoded: parsing a 100k-record batch's effects with
        ``json.loads`` to read it took about 0.1 s of the driver per 300k replay; msgspec
        decoding one field takes 7 ms where ``json.loads`` took 117 ms
        (docs/explanation/streaming-performance.md).
        """
        try:
            found = _decode_batch_id(statefs.read(self.path)).batch_id
        except FileNotFoundError:
            return
        if found == batch_id:
            statefs.delete(self.path)

    def expects_fence(self) -> bool | None:
        """Whether the pending batch counted against a fence (None: no pending file)."""
        try:
            return bool(_decode_expected(statefs.read(self.path)).expected)
        except FileNotFoundError:
            return None


def effects_gone(checkpoint: Location, fence_exists: bool) -> bool:
    """Whether Redis lost what the checkpoint's query applied (docs/runbooks/redis-lost.md).

    Every applied batch leaves the fence hash behind, so committed batches without it mean Redis
    lost them, unless the pending batch counted against no fence: the view's first apply, left
    by a stop or crash before it was made.
    """
    if fence_exists or last_committed(checkpoint) is None:
        return False
    return PendingApplyFile(checkpoint).expects_fence() is not False


def fingerprint(source_topics: list[str], windows: dict[str, int], sinks: list[str]) -> dict[str, Any]:
    """What a checkpoint's offsets and state mean; a change makes the checkpoint unusable."""
    return {"format": STATE_FORMAT, "source_topics": sorted(source_topics),
            "windows_ms": dict(sorted(windows.items())), "sinks": sorted(sinks)}


def fingerprint_file(checkpoint: Location) -> Location:
    """``<checkpoint>.fingerprint.json``, beside the checkpoint folder."""
    return checkpoint.with_name(checkpoint.name + ".fingerprint.json")


def check_fingerprint(checkpoint: Location, expected: dict[str, Any], query: str) -> None:
    """Write the fingerprint of a new checkpoint; refuse an existing one built for something else.

    The first writer wins (a create-if-absent write): of two drivers racing to start a new
    checkpoint, the second checks its fingerprint against the first's.
    """
    path = fingerprint_file(checkpoint)
    try:
        found = json.loads(statefs.read(path))
    except FileNotFoundError:
        if statefs.listdir(checkpoint / "offsets"):
            raise CheckpointError(
                f"the checkpoint of query {query!r} at {checkpoint} has no fingerprint "
                f"({path.name}); it was not written by this job. Inspect it with `kappa stream "
                f"checkpoint inspect {query}`, then rebuild or reset it (docs/runbooks/checkpoint.md)"
            ) from None
        if statefs.create(path, _encode(expected)):
            return
        found = json.loads(statefs.read(path))   # another driver created it first
    if found != expected:
        changed = sorted(k for k in set(found) | set(expected) if found.get(k) != expected.get(k))
        raise CheckpointError(
            f"the checkpoint of query {query!r} at {checkpoint} was built for a different "
            f"query ({', '.join(changed)} changed: was {[found.get(k) for k in changed]}, now "
            f"{[expected.get(k) for k in changed]}). Recover with one of: revert the config; "
            f"`kappa stream checkpoint reset {query} --to <timestamp>` (new checkpoint from a "
            f"time); `kappa stream checkpoint rebuild {query}` (from the offsets the sinks "
            "recorded); or run under a new streaming.query_name. See docs/runbooks/checkpoint.md")


def lock_file(checkpoint: Location) -> Path:
    """The local file a query's flock holds: ``<checkpoint>.lock``.

    For a checkpoint on S3 the file is this host's own (``<tmp>/kappa-locks/``), keyed by the
    location: a flock only guards one host, and the lease guards the query across hosts.
    """
    if isinstance(checkpoint, Path):
        return checkpoint.with_name(checkpoint.name + ".lock")
    digest = hashlib.sha1(str(checkpoint).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / "kappa-locks" / f"{checkpoint.name}-{digest}.lock"


class QueryLock:
    """An exclusive flock on the query's :func:`lock_file` held while the query runs."""

    def __init__(self, checkpoint: Location, query: str) -> None:
        self.path = lock_file(checkpoint)
        self.query = query
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise AlreadyRunning naming the holder's pid."""
        try:
            self._fd = exclusive_lock(self.path, str(os.getpid()))
        except LockHeld as held:
            raise AlreadyRunning(f"query {self.query!r} already runs (pid {held.holder or '?'}, lock "
                                 f"{self.path}); stop it first (`kappa stream stop`)") from None

    def release(self) -> None:
        """Drop the lock (also dropped by the kernel when the process dies)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def lock_holder(checkpoint: Location) -> int | None:
    """The pid holding a query's lock on this host, or None when it does not run here."""
    path = lock_file(checkpoint)
    if not path.is_file():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        text = path.read_text().strip()
        return int(text) if text.isdigit() else -1
    finally:
        os.close(fd)
    return None


def batch_ids(folder: Location) -> list[int]:
    """The batch ids of a Spark checkpoint log folder (``offsets/``, ``commits/``), ascending."""
    return sorted(int(name) for name in statefs.listdir(folder) if name.isdigit())


def last_offsets(checkpoint: Location) -> tuple[int, dict[str, dict[str, int]]] | None:
    """The last planned batch id and its end offsets from Spark's offset log (None if empty)."""
    ids = batch_ids(checkpoint / "offsets")
    if not ids:
        return None
    lines = statefs.read(checkpoint / "offsets" / str(ids[-1])).decode().splitlines()
    sources = [json.loads(line) for line in lines[2:] if line.strip().startswith("{")]
    return ids[-1], (sources[0] if sources else {})


def last_committed(checkpoint: Location) -> int | None:
    """The last batch id Spark committed (None if none)."""
    ids = batch_ids(checkpoint / "commits")
    return ids[-1] if ids else None


_encode = msgspec.json.Encoder().encode


def write_json(path: Location, data: dict[str, Any]) -> None:
    """Durably replace ``path`` with ``data`` as JSON (locally fsync, then rename; on S3 one PUT).

    One write of msgspec's encoding: json.dump writes piece by piece, 30 of the 40 ms a
    100k-record batch's pending effects took on the driver (measured with py-spy).
    """
    statefs.write(path, _encode(data))
