"""What a reconcile found: its report, each difference, the drift error, and their record.

Every difference goes to ``ops.reconciliation`` (one row per key, with the run's id), the run's
counts to ``platform.metrics`` (``kind: reconciliation``); :class:`ViewsDrift` (exit 6) carries
the whole report. Used by the batch tier's reconcile (jobs/batch/reconcile.py) and the engine's
(jobs/engine/lake/reconcile.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from jobs.errors import KappaError

if TYPE_CHECKING:
    from jobs.config.load import KappaConfig

RECONCILIATION_TABLE = "ops.reconciliation"


class ViewsDrift(KappaError):
    """A live view differs from the lake's recomputation beyond its bound; ``report`` says where."""

    exit_code = 6

    def __init__(self, message: str, report: ReconcileReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class Difference:
    """One key whose live value is not the lake's (a row of ``ops.reconciliation``)."""

    view: str
    kind: str
    key: str
    live_value: str | None
    lake_value: str | None
    allowed_error: float
    verdict: str


@dataclass
class ReconcileReport:
    """What one reconciliation compared and found."""

    run_id: str
    dates: list[str] | None
    checked: dict[str, int] = field(default_factory=dict)
    differences: list[Difference] = field(default_factory=list)
    source_versions: dict[str, int | None] = field(default_factory=dict)
    expired: int = 0
    """Lake windows absent from a live side that started over its expiry ago (a Redis key's TTL):
    they expired as designed, so they are not compared."""
    compared: dict[str, list[str]] = field(default_factory=dict)
    not_compared: list[dict[str, str]] = field(default_factory=list)

    @property
    def drifts(self) -> list[Difference]:
        """The differences beyond their bound."""
        return [item for item in self.differences if item.verdict == "drift"]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {"run_id": self.run_id, "dates": self.dates, "checked": self.checked,
                "differences": [asdict(item) for item in self.differences], "drifts": len(self.drifts),
                "source_versions": self.source_versions, "expired_windows_not_compared": self.expired,
                "compared": self.compared, "not_compared": self.not_compared}


def text(value: Any) -> str | None:
    """A value as the report writes it: JSON with sorted keys (None stays None)."""
    return None if value is None else json.dumps(value, sort_keys=True)


def record(cfg: KappaConfig, report: ReconcileReport) -> None:
    """Append the differences to ops.reconciliation and publish the run's metric."""
    import pyarrow as pa

    from jobs.lake.delta import open_delta, table_uri, write_delta
    from jobs.lake.storage import storage_options

    now = datetime.now(UTC)
    if report.differences:
        rows = [{"run_id": report.run_id, "checked_at": now, **asdict(item)} for item in report.differences]
        uri = table_uri(cfg.lake.root, RECONCILIATION_TABLE)
        storage = storage_options(cfg.lake)
        write_delta(uri, pa.Table.from_pylist(rows), snapshot=open_delta(uri, storage),
                    exclusive_create=False, storage=storage)
    metric = {"schema_version": 1, "kind": "reconciliation", "run_id": report.run_id, "dates": report.dates,
              "checked": report.checked, "differences": len(report.differences), "drifts": len(report.drifts),
              "source_versions": report.source_versions, "emitted_ms": int(time.time() * 1000)}
    _publish(cfg, metric)


def _publish(cfg: KappaConfig, metric: Mapping[str, Any]) -> None:
    from confluent_kafka import Producer

    producer = Producer(cfg.kafka.client_config())
    producer.produce(cfg.streaming.metrics_topic, json.dumps(metric).encode(), key=b"reconcile")
    if producer.flush(10):
        raise KappaError(f"the reconciliation metric was not delivered to {cfg.streaming.metrics_topic} "
                         "within 10 s; the differences are in ops.reconciliation (see kappa stack status)")
