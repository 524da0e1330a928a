"""``kappa batch run``: recompute date partitions of a batch table from pinned source snapshots.

One run of one job: open each source at one version (the latest, or the version asked for),
read the partitions of the run's dates, compute the table with the job's pure transform, and
replace those partitions of the table in one Delta transaction whose commit metadata records
the source versions, the dates and the run id. A re-run, a retry or an Airflow backfill of the
same dates replaces the same partitions with the same rows.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING

from jobs.batch.jobs import BatchJob, chosen_jobs, job
from jobs.config.load import KappaConfig
from jobs.errors import ConfigError
from jobs.lake.delta import table_uri
from jobs.lake.storage import storage_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

MAX_DATES = 3660  # ten years of days in one run: a typo in --from would otherwise read the lake


@dataclass
class JobReport:
    """What one run did (JSON-ready with :meth:`as_dict`)."""

    job: str
    table: str
    dates: list[str]
    rows_read: int = 0
    rows_written: int = 0
    partitions_replaced: int = 0
    source_versions: dict[str, int | None] = field(default_factory=dict)
    target_version: int | None = None
    run_id: str = ""
    duration_s: float = 0.0

    def as_dict(self) -> dict:
        """JSON-ready summary."""
        return asdict(self) | {"duration_s": round(self.duration_s, 3)}


def parse_date(text: str, option: str) -> date:
    """An ISO date (``YYYY-MM-DD``) of a command-line option; ConfigError (exit 2) otherwise."""
    try:
        return date.fromisoformat(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{option} {text!r} is not a date: expected YYYY-MM-DD, e.g. 2026-01-01") from None


def date_range(start: date, end: date) -> list[date]:
    """The dates of ``[start, end)``; ConfigError when the range is empty or absurdly long."""
    if start >= end:
        raise ConfigError(f"--from {start} must be before --to {end} (the range is [from, to): "
                          f"--to {start + timedelta(days=1)} runs the one date {start})")
    days = (end - start).days
    if days > MAX_DATES:
        raise ConfigError(f"[{start}, {end}) holds {days} dates, more than {MAX_DATES}: split the run")
    return [start + timedelta(days=offset) for offset in range(days)]


def interval_dates(start: datetime, end: datetime) -> list[date]:
    """The dates an Airflow data interval covers (``@daily``: one date)."""
    first = start.date()
    last = end.date() if end.time() != datetime.min.time() else end.date() - timedelta(days=1)
    return date_range(first, max(last, first) + timedelta(days=1))


def run_job(spark: SparkSession, cfg: KappaConfig, name: str | BatchJob, dates: Sequence[date], *,
            versions: Mapping[str, int] | None = None,
            progress: Callable[[str], None] = lambda line: None, pipeline: str | None = None) -> JobReport:
    """Recompute ``dates`` of job ``name`` and replace them in one commit; return the report.

    A run that computes no rows for its dates while the table holds none of them makes no
    commit (``partitions_replaced`` 0); one whose dates still hold rows replaces them with empty
    partitions (their rows went away, e.g. records whose event date changed).

    Args:
        spark: the session.
        cfg: the run's config (``lake.root``).
        name: the job of ``pipeline`` (``kappa batch list``), or a job itself.
        dates: the partitions to replace.
        versions: source table -> the version to read (default: each source's latest).
        progress: receives one line per step.
        pipeline: the pipeline whose job ``name`` is (default: ``pipelines.default``, or the only one).
    """
    from jobs.batch.lake import existing_files, read_source, replace_partitions, snapshot_at

    spec: BatchJob = name if isinstance(name, BatchJob) else job(name, pipeline, cfg)
    name = spec.name
    days = sorted(set(dates))
    if not days:
        raise ConfigError(f"{name}: no dates to recompute")
    began = time.monotonic()
    report = JobReport(name, spec.table, [day.isoformat() for day in days], run_id=uuid.uuid4().hex[:12])
    frames, storage = {}, storage_options(cfg.lake)
    for source in spec.sources:
        uri = table_uri(cfg.lake.root, source.table)
        snapshot = snapshot_at(uri, (versions or {}).get(source.table), storage)
        report.source_versions[source.table] = None if snapshot is None else snapshot.version()
        frames[source.table], rows = read_source(spark, uri, snapshot, source, days, storage=storage)
        report.rows_read += rows
        progress(f"{name}: {source.table} at version {report.source_versions[source.table]}: "
                 f"{rows} rows")
    progress(f"{name}: computing {spec.table} for {len(days)} date(s) {days[0]} .. {days[-1]}")
    rows_out = spec.build(frames).toArrow()
    uri = table_uri(cfg.lake.root, spec.table)
    if rows_out.num_rows == 0:
        version, held = existing_files(uri, spec.date_column, days, storage)
        if not held:
            report.target_version, report.duration_s = version, time.monotonic() - began
            progress(f"{name}: no rows for {len(days)} date(s) and none in {spec.table} to remove: "
                     "no commit")
            return report
    metadata = {"kappa.batch.job": name, "kappa.batch.run_id": report.run_id,
                "kappa.batch.dates": json.dumps(report.dates),
                "kappa.batch.source_versions": json.dumps(report.source_versions, sort_keys=True)}
    report.target_version = replace_partitions(uri, rows_out, column=spec.date_column, dates=days,
                                               metadata=metadata, storage=storage)
    report.rows_written, report.partitions_replaced = rows_out.num_rows, len(days)
    report.duration_s = time.monotonic() - began
    progress(f"{name}: replaced {len(days)} partition(s) of {spec.table} with {rows_out.num_rows} rows "
             f"(version {report.target_version}) in {report.duration_s:.1f}s")
    return report


def run_jobs(spark: SparkSession, cfg: KappaConfig, names: Sequence[str], dates: Sequence[date],
             progress: Callable[[str], None] = lambda line: None, *, pipeline: str | None = None,
             versions: Mapping[str, int] | None = None) -> list[JobReport]:
    """Run several jobs of ``pipeline`` (``all``: every one) over the same dates, each its own commit."""
    return [run_job(spark, cfg, spec, dates, versions=versions, progress=progress)
            for spec in chosen_jobs(names, pipeline, cfg)]


def batch_spark(cfg: KappaConfig) -> SparkSession:
    """The session of a batch run (the project's factory)."""
    from jobs.spark.session import build_spark

    return build_spark(cfg, app_name=f"{cfg.spark.app_name}-batch")
