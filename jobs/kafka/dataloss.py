"""Data loss: records the query should have read that Kafka no longer has.

With ``failOnDataLoss=true`` (the default) the read fails with a message naming the
topic-partition, the requested offset and the earliest available one. With ``false`` it skips
ahead, logs a WARNING and, when ``dataLossLogDir`` is set, records the event in a *ledger*: one
small JSON file per (topic, partition, requested offset), written atomically (a local folder or
S3, jobs/lake/statefs.py). Replaying the same batch rewrites the same file, so
:func:`skipped_records` counts every lost record once.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from jobs.errors import KafkaSourceError
from jobs.lake import statefs

logger = logging.getLogger(__name__)

FAIL_HINT = (
    "The query stops because failOnDataLoss=true. To skip the lost records and go on, restart it "
    "with failOnDataLoss=false (skipped records are counted in dataLossLogDir); to start over "
    "from the earliest available offsets, reset the checkpoint (docs/runbooks/kafka-source.md)")
SKIP_HINT = ("Skipping ahead because failOnDataLoss=false; set it to true to stop the query "
             "instead")


@dataclass(frozen=True)
class DataLoss:
    """One data-loss event of one topic-partition.

    Attributes:
        kind: ``deleted`` (start below the log start: retention or DeleteRecords),
            ``new_partition`` (a partition first seen with a log start above 0),
            ``partition_gone`` (a partition of the checkpoint no longer exists) or
            ``offset_reset`` (the partition's latest offset went below the checkpoint).
        requested: the offset the query needed next.
        earliest: the earliest offset Kafka still had (None if unknown).
        skipped: records skipped (None if unknown).
    """

    kind: str
    topic: str
    partition: int
    requested: int
    earliest: int | None = None
    skipped: int | None = None

    def describe(self) -> str:
        """An operator-readable sentence about the loss."""
        where = f"{self.topic}-{self.partition}"
        if self.kind == "partition_gone":
            return (f"topic-partition {where} is gone (deleted topic?) at requested offset "
                    f"{self.requested}; records after it may have been missed")
        if self.kind == "offset_reset":
            return (f"{where}: requested offset {self.requested} but the latest offset is "
                    f"{self.earliest}; the partition was recreated or truncated")
        what = "added partition starts" if self.kind == "new_partition" else "records were deleted"
        return (f"data loss in {where}: requested offset {self.requested} but the earliest "
                f"available offset is {self.earliest} ({what}; {self.skipped} record(s) lost to "
                "retention or DeleteRecords)")


def report(losses: list[DataLoss], *, fail: bool, ledger_dir: str | None) -> None:
    """Fail on the first loss, or log each one and write it to the ledger."""
    if not losses:
        return
    if fail:
        raise KafkaSourceError(f"{losses[0].describe()}. {FAIL_HINT}")
    for loss in losses:
        logger.warning("kafka data loss kind=%s topic=%s partition=%s requested=%s earliest=%s "
                       "skipped=%s: %s. %s", loss.kind, loss.topic, loss.partition, loss.requested,
                       loss.earliest, loss.skipped, loss.describe(), SKIP_HINT)
        if ledger_dir:
            _record(statefs.location(ledger_dir), loss)


def read_ledger(ledger_dir: str | Path) -> list[DataLoss]:
    """Every data-loss event recorded in ``ledger_dir`` (empty if there is none)."""
    folder = statefs.location(ledger_dir)
    events = []
    for name in statefs.listdir(folder):
        if name.startswith(".") or not name.endswith(".json"):
            continue
        data = json.loads(statefs.read(folder / name))
        data.pop("detected_at", None)
        events.append(DataLoss(**data))
    return events


def skipped_records(ledger_dir: str | Path) -> int:
    """Records skipped because of data loss, as recorded in the ledger."""
    return sum(event.skipped or 0 for event in read_ledger(ledger_dir))


def _record(folder: statefs.Location, loss: DataLoss) -> None:
    target = folder / f"{loss.kind}.{loss.topic}.{loss.partition}.{loss.requested}.json"
    payload = asdict(loss) | {"detected_at": datetime.now(UTC).isoformat()}
    statefs.write(target, json.dumps(payload).encode())
