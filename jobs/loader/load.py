"""``kappa load``: bounded Kafka reads into Delta tables, exactly once, behind quality gates.

Per table: open the table's latest snapshot, read the offsets it records (Delta app
transactions, one per topic-partition), read ``[recorded, bound)`` from Kafka through the data
source, transform, validate, and commit rows + new offsets in one Delta transaction based on
that snapshot. A crash before the commit leaves the old offsets (the re-run reads the same range
again); a crash after it leaves the new ones (the re-run starts after them). Two runs planning
from the same snapshot both record the same app ids, so Delta's conflict check lets only one
commit.

Each batch goes one of two write paths (jobs/loader/scale.py ``choose_write_path``): the driver
path collects the batch as Arrow, validates it and writes it with delta-rs (at most
``loader.driver_path_max_rows`` records and ``loader.driver_path_max_bytes`` of them per batch);
the executor path validates and writes the data files on the executors and the driver commits
them, with the same offsets and the same quality results. docs/tables.md "Write paths".
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.config.load import KappaConfig
from jobs.errors import KappaError
from jobs.lake.delta import (
    Commit,
    DeltaConflictError,
    DeltaError,
    app_version,
    commit_files,
    open_delta,
    table_uri,
    write_delta,
)
from jobs.lake.storage import storage_options
from jobs.loader import audit
from jobs.loader.merge import deletion_vectors
from jobs.loader.offsets import PartitionRange, Until, cap_ranges, plan, sample_record_bytes
from jobs.loader.scale import choose_write_path, driver_batch_records
from jobs.loader.suites import Rule, suite_rules
from jobs.loader.tables import LoadTarget, TableSpec, quarantine_name, read_frame

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

STACK_LINE = re.compile(r"^(at |\d+: |\.\.\. \d+ more)")
MAX_ERROR_CHARS = 500


class QualityFailure(KappaError):
    """A batch failed its data-quality suite under policy ``fail``: nothing was committed."""

    exit_code = 5


@dataclass
class TableResult:
    """The outcome of one batch of one table (also one row of ``ops.load_audit``).

    ``write_path`` is the path that wrote it (``driver`` or ``executors``); ``cut`` says the
    driver path cut the batch at its row or byte budget (another batch follows).
    """

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
    write_path: str = "driver"
    cut: bool = False

    def as_dict(self) -> dict:
        """JSON-ready summary."""
        return {"table": self.table, "topic": self.topic, "outcome": self.outcome, "rows": self.rows,
                "quarantined": self.quarantined, "delta_version": self.version, "error": self.error,
                "duration_s": round(self.duration_s, 3), "failed_expectations": self.failed_expectations,
                "write_path": self.write_path,
                "ranges": {str(r.partition): [r.start, r.end] for r in self.ranges}}


def run_load(spark: SparkSession, cfg: KappaConfig, targets: list[LoadTarget], until: Until,
             progress: Callable[[str], None] = lambda line: None) -> list[TableResult]:
    """Load every target up to ``until``; each table is its own transaction and audit row."""
    run_id = uuid.uuid4().hex[:12]
    started_at = datetime.now(UTC)
    results = []
    for target in targets:
        loaded = 0
        while True:  # a driver-path batch cut at its budget is followed by the next one
            result = _load_batch(spark, cfg, target, until=until, run_id=run_id, progress=progress)
            audit.record(cfg, run_id, started_at, until.describe(), result)
            results.append(result)
            loaded += sum(r.records for r in result.ranges)
            cap = cfg.loader.max_records_per_run
            if result.outcome != "committed" or not result.cut or (cap is not None and loaded >= cap):
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
    except Exception as exc:  # Spark (Py4JJavaError), delta-rs, Kafka: this table fails, the others load
        logger.debug("load failed table=%s", target.spec.name, exc_info=True)
        result.outcome, result.error = "error", _summary(exc)
    result.duration_s = time.monotonic() - began
    progress(f"{target.spec.name}: {result.outcome} rows={result.rows} "
             f"quarantined={result.quarantined} in {result.duration_s:.1f}s")
    return result


def _load_table(spark: SparkSession, cfg: KappaConfig, target: LoadTarget, *, until: Until, run_id: str,
                result: TableResult, progress: Callable[[str], None]) -> None:
    spec = target.spec
    snapshot = open_delta(target.uri, storage_options(cfg.lake))
    ranges = plan(cfg, spec, target.topic, snapshot, until=until, max_records=cfg.loader.max_records_per_run)
    rules = suite_rules(cfg, spec.name, spec.rules)
    ranges, why = _choose_path(cfg, spec, rules, ranges, snapshot=snapshot, result=result)
    result.ranges = ranges
    planned = sum(r.records for r in ranges)
    if planned == 0:
        return
    progress(f"{spec.name}: reading {planned} offsets of {target.topic} ({_describe(ranges)}); "
             f"{result.write_path} path: {why}")
    commit = Commit(
        app_versions={spec.app_id(r.topic, r.partition): r.end for r in ranges},
        metadata={"kappa.run_id": run_id, "kappa.topic": target.topic, "kappa.write_path": result.write_path,
                  "kappa.offsets": json.dumps({str(r.partition): [r.start, r.end] for r in ranges})})
    frame = read_frame(spark, cfg, target, ranges)
    batch = _Batch(target, snapshot, commit, run_id, result)
    if result.write_path == "executors":
        _through_executors(cfg, batch, rules, frame)
    else:
        _through_driver(cfg, batch, frame.toArrow())


def _choose_path(cfg: KappaConfig, spec: TableSpec, rules: list[Rule], ranges: list[PartitionRange], *,
                 snapshot: DeltaTable | None, result: TableResult) -> tuple[list[PartitionRange], str]:
    """Set the batch's write path; return its ranges (a driver-path batch cut to its budget) and why.

    The records' size is sampled only where the driver path is in question.
    """
    records = sum(r.records for r in ranges)
    result.write_path, why = choose_write_path(cfg, spec, rules, records)
    sampled = sample_record_bytes(cfg, ranges) if result.write_path == "driver" and records else None
    if sampled is not None:
        result.write_path, why = choose_write_path(cfg, spec, rules, records, sampled)
    if result.write_path == "executors" and spec.mode == "merge" and deletion_vectors(snapshot):
        result.write_path, why = "driver", "the table has deletion vectors: delta-rs merges it"
    if result.write_path == "driver":
        capped = cap_ranges(ranges, driver_batch_records(cfg, sampled))
        result.cut, ranges = capped != ranges, capped
    return ranges, why


@dataclass(frozen=True)
class _Batch:
    """One planned batch: where it goes, the snapshot it is based on, what its commit records."""

    target: LoadTarget
    snapshot: DeltaTable | None
    commit: Commit
    run_id: str
    result: TableResult


def _through_driver(cfg: KappaConfig, batch: _Batch, rows: pa.Table) -> None:
    from jobs.loader.quality import validate

    target, commit, result = batch.target, batch.commit, batch.result
    spec = target.spec
    checked = validate(cfg, target, rows, batch.run_id)
    _gate(target, result, checked.failed, checked.blocking, orphans=False)
    if checked.bad.num_rows:
        _quarantine(cfg, target, commit, rows=checked.bad)
        result.quarantined = checked.bad.num_rows
    result.version = write_delta(
        target.uri, checked.good, snapshot=batch.snapshot, mode=spec.mode, partition_by=spec.partition_by,
        merge_keys=spec.keys, merge_condition=spec.newer, commit=commit, storage=storage_options(cfg.lake))
    result.rows, result.outcome = checked.good.num_rows, "committed"


def _through_executors(cfg: KappaConfig, batch: _Batch, rules: list[Rule], frame: DataFrame) -> None:
    from jobs.loader.chunks import combine, sort_keys
    from jobs.loader.merge import check_on_executors, merge_on_executors, remove_actions
    from jobs.loader.quality import judge, keep_results
    from jobs.loader.scale import TaskPlan, add_actions, arrow_schema, write_on_executors

    target, commit, result = batch.target, batch.commit, batch.result
    spec, schema = target.spec, arrow_schema(frame)
    task = TaskPlan(spec.name, target.uri, table_uri(cfg.lake.root, quarantine_name(spec.name)),
                    spec.partition_by, tuple(rules), target.policy, batch.run_id,
                    cfg.loader.executor_chunk_rows, sort_keys(rules, spec.keys), storage_options(cfg.lake))
    good = cached = None
    if spec.mode == "merge":  # good rows stay on the executors until the verdict (jobs/loader/merge.py)
        cached, good, written = check_on_executors(frame, task)
    else:
        written = write_on_executors(frame, task)
    try:
        if written.reports:  # none when the range held no rows: nothing to judge, as on the driver path
            results = combine(spec.name, rules, written.reports, schema, task.keys)
            failed, blocking, records = judge(target, rules, results, batch.run_id)
            keep_results(cfg, records)
            _gate(target, result, failed, blocking, orphans=True)
        if written.quarantine:
            _quarantine(cfg, target, commit, files=add_actions(written.quarantine), schema=schema)
            result.quarantined = written.quarantined
        removed: list[dict] = []
        if good is not None:
            written.data, removed = merge_on_executors(good, batch.snapshot, task, keys=spec.keys,
                                                       newer=spec.newer)
        result.version = commit_files(target.uri, add_actions(written.data) + remove_actions(removed), schema,
                                      snapshot=batch.snapshot, partition_by=spec.partition_by, commit=commit,
                                      removed=[item["path"] for item in removed], storage=task.storage)
    finally:
        if cached is not None:
            cached.unpersist()
    result.rows, result.outcome = written.rows, "committed"


def _gate(target: LoadTarget, result: TableResult, failed: list[str], blocking: bool, *,
          orphans: bool) -> None:
    """Raise :class:`QualityFailure` when the failed rules stop the batch (policy or blocking)."""
    result.failed_expectations = failed
    if not failed or (target.policy != "fail" and not blocking):
        return
    left = (" The files the executors wrote are referenced by no commit; `kappa maintain` removes "
            "them after the retention." if orphans else "")
    raise QualityFailure(
        f"{target.spec.name}: batch {_describe(result.ranges)} failed its quality suite "
        f"({'; '.join(failed)}); nothing committed.{left} See `kappa quality report` and "
        "docs/runbooks/loader.md 'Data-quality failure'")


def _quarantine(cfg: KappaConfig, target: LoadTarget, commit: Commit, *, rows: pa.Table | None = None,
                files: list[Any] | None = None, schema: pa.Schema | None = None) -> None:
    """Failing rows (driver path) or files (executor path) to ``quarantine.<table>``, once per range.

    The quarantine commit records the same app ids as the table's, so a retried range is not
    quarantined twice (the retry's quarantine files stay orphans).
    """
    from jobs.loader.scale import quarantine_schema

    uri, storage = table_uri(cfg.lake.root, quarantine_name(target.spec.name)), storage_options(cfg.lake)
    snapshot = open_delta(uri, storage)
    done = all((app_version(snapshot, app) or -1) >= version for app, version in commit.app_versions.items())
    if done:
        logger.info("quarantine already holds this range table=%s", target.spec.name)
    elif rows is not None:
        write_delta(uri, rows, snapshot=snapshot, mode="append", commit=commit, storage=storage)
    elif schema is not None:
        commit_files(uri, files or [], quarantine_schema(schema), snapshot=snapshot, partition_by=(),
                     commit=commit, storage=storage)


def _summary(exc: Exception) -> str:
    """One line for an unexpected failure: its type and message.

    Without stack frames (Java's ``at ...`` lines, delta-rs's numbered backtrace).
    """
    lines = [line.strip() for line in str(exc).splitlines()]
    text = " ".join(line for line in lines if line and not STACK_LINE.match(line))[:MAX_ERROR_CHARS]
    return f"{type(exc).__name__}: {text}; see docs/runbooks/loader.md 'The loader is failing'"


def _describe(ranges: list[PartitionRange]) -> str:
    return ", ".join(f"{r.topic}-{r.partition} [{r.start}, {r.end})" for r in ranges if r.records)
