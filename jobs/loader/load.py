"""``kappa load``: bounded Kafka reads into Delta tables, exactly once, behind quality gates.

Per table: open the table's latest snapshot, read the offsets it records (Delta app
transactions, one per topic-partition), read ``[recorded, bound)`` from Kafka through the data
source, transform, validate, and commit rows + new offsets in one Delta transaction based on
that snapshot. A crash before the commit leaves the old offsets (the re-run reads the same range
again); a crash after it leaves the new ones (the re-run starts after them). Two runs planning
from the same snapshot both record the same app ids, so Delta's conflict check lets only one
commit.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pyarrow as pa

from jobs.common.config import KappaConfig
from jobs.common.delta import Commit, DeltaConflictError, DeltaError, open_delta, write_delta
from jobs.common.errors import KappaError
from jobs.loader import audit
from jobs.loader.offsets import PartitionRange, Until, plan
from jobs.loader.tables import LoadTarget, quarantine_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)


class QualityFailure(KappaError):
    """A batch failed its data-quality suite under policy ``fail``: nothing was committed."""

    exit_code = 5


@dataclass
class TableResult:
    """The outcome of one table in one run (also one row of ``ops.load_audit``)."""

    table: str
    topic: str
    ranges: list[PartitionRange]
    outcome: str = "noop"
    rows: int = 0
    quarantined: int = 0
    version: int | None = None
    error: str | None = None
    duration_s: float = 0.0
    failed_expectations: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """JSON-ready summary."""
        return {"table": self.table, "topic": self.topic, "outcome": self.outcome, "rows": self.rows,
                "quarantined": self.quarantined, "delta_version": self.version, "error": self.error,
                "duration_s": round(self.duration_s, 3), "failed_expectations": self.failed_expectations,
                "ranges": {str(r.partition): [r.start, r.end] for r in self.ranges}}


def run_load(spark: SparkSession, cfg: KappaConfig, targets: list[LoadTarget], until: Until,
             progress: Callable[[str], None] = lambda line: None) -> list[TableResult]:
    """Load every target up to ``until``; each table is its own transaction and audit row."""
    run_id = uuid.uuid4().hex[:12]
    started_at = datetime.now(UTC)
    results = []
    for target in targets:
        loaded = 0
        while True:  # batches of at most driver_path_max_rows records, each its own transaction
            result = _load_batch(spark, cfg, target, until=until, run_id=run_id, progress=progress)
            audit.record(cfg, run_id, started_at, until.describe(), result)
            results.append(result)
            loaded += sum(r.records for r in result.ranges)
            cap = cfg.loader.max_records_per_run
            full = sum(r.records for r in result.ranges) >= cfg.loader.driver_path_max_rows
            if result.outcome != "committed" or not full or (cap is not None and loaded >= cap):
                break
    return results


def _load_batch(spark: SparkSession, cfg: KappaConfig, target: LoadTarget, *, until: Until, run_id: str,
                progress: Callable[[str], None]) -> TableResult:
    began = time.monotonic()
    result = TableResult(target.spec.name, target.topic, [])
    try:
        _load_table(spark, cfg, target, until=until, run_id=run_id, result=result, progress=progress)
    except (DeltaConflictError, QualityFailure, DeltaError) as exc:
        result.outcome = {DeltaConflictError: "conflict", QualityFailure: "failed_quality"}.get(
            type(exc), "error")
        result.error = str(exc)
    except KappaError as exc:
        result.outcome, result.error = "error", str(exc)
    result.duration_s = time.monotonic() - began
    progress(f"{target.spec.name}: {result.outcome} rows={result.rows} "
             f"quarantined={result.quarantined} in {result.duration_s:.1f}s")
    return result


def _load_table(spark: SparkSession, cfg: KappaConfig, target: LoadTarget, *, until: Until, run_id: str,
                result: TableResult, progress: Callable[[str], None]) -> None:
    spec = target.spec
    snapshot = open_delta(target.uri)
    cap = min(cfg.loader.max_records_per_run or cfg.loader.driver_path_max_rows,
              cfg.loader.driver_path_max_rows)
    result.ranges = plan(cfg, spec, target.topic, snapshot, until=until, max_records=cap)
    planned = sum(r.records for r in result.ranges)
    if planned == 0:
        return
    progress(f"{spec.name}: reading {planned} offsets of {target.topic} ({_describe(result.ranges)})")
    rows = read_rows(spark, cfg, target, result.ranges)
    from jobs.loader.quality import validate

    checked = validate(cfg, target, rows, run_id)
    result.failed_expectations = checked.failed
    commit = Commit(
        app_versions={spec.app_id(r.topic, r.partition): r.end for r in result.ranges},
        metadata={"kappa.run_id": run_id, "kappa.topic": target.topic,
                  "kappa.offsets": json.dumps({str(r.partition): [r.start, r.end] for r in result.ranges})})
    if checked.failed and (target.policy == "fail" or checked.blocking):
        raise QualityFailure(
            f"{spec.name}: batch {_describe(result.ranges)} failed its quality suite "
            f"({'; '.join(checked.failed)}); nothing committed. See `kappa quality report` and "
            "docs/runbooks/loader.md 'Data-quality failure'")
    if checked.bad.num_rows:
        _quarantine(cfg, target, checked.bad, commit)
        result.quarantined = checked.bad.num_rows
    result.version = write_delta(
        target.uri, checked.good, snapshot=snapshot, mode=spec.mode, partition_by=spec.partition_by,
        merge_keys=spec.keys, merge_condition=spec.newer, commit=commit)
    result.rows, result.outcome = checked.good.num_rows, "committed"


def read_rows(spark: SparkSession, cfg: KappaConfig, target: LoadTarget,
              ranges: list[PartitionRange]) -> pa.Table:
    """Read the ranges through the Kafka data source, apply the table's transform, return Arrow."""
    from jobs.common.kafka.adapter import read_kafka

    starting: dict[str, dict[int | str, int]] = {target.topic: {r.partition: r.start for r in ranges}}
    ending: dict[str, dict[int | str, int]] = {target.topic: {r.partition: r.end for r in ranges}}
    options = {"includeHeaders": "true"} if target.spec.headers else {}
    frame = read_kafka(spark, cfg, topics=target.topic, starting=starting, ending=ending, options=options)
    return frame.transform(target.spec.rows()).toArrow()


def _quarantine(cfg: KappaConfig, target: LoadTarget, bad: pa.Table, commit: Commit) -> None:
    """Failing rows to ``quarantine.<table>``, once per range (same app ids as the table)."""
    from jobs.common.delta import app_version, table_uri

    uri = table_uri(cfg.lake.root, quarantine_name(target.spec.name))
    snapshot = open_delta(uri)
    done = all((app_version(snapshot, app) or -1) >= version for app, version in commit.app_versions.items())
    if done:
        logger.info("quarantine already holds this range table=%s", target.spec.name)
        return
    write_delta(uri, bad, snapshot=snapshot, mode="append", commit=commit)


def _describe(ranges: list[PartitionRange]) -> str:
    return ", ".join(f"{r.topic}-{r.partition} [{r.start}, {r.end})" for r in ranges if r.records)
