"""``kappa maintain``: compact closed partitions, vacuum with a guarded retention.

Only partitions whose date is older than ``loader.open_partition_days`` are compacted, so the
loader (which appends to recent dates) never races the compaction; a concurrent commit would
still only make one of them fail (Delta optimistic concurrency), never corrupt the table. The
loader's own logs (``ops.load_audit``, ``ops.quality_results``: one small file per run, no
partitions) are compacted whole once they hold ``loader.compact_min_files`` files; a run
appending meanwhile does not conflict with it (a blind append).
Vacuum (the table's and its quarantine table's) removes files older than the retention that no
commit references any more or ever did, and refuses a retention below ``loader.vacuum_floor_h``
or the slowest reader's lag.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from jobs.config.load import KappaConfig
from jobs.errors import ConfigError
from jobs.lake.delta import open_delta, table_uri
from jobs.lake.storage import storage_options
from jobs.loader.tables import AUDIT_TABLE, QUALITY_TABLE, LoadTarget, quarantine_name

LOGS = (AUDIT_TABLE, QUALITY_TABLE)


class RetentionTooShort(ConfigError):
    """The vacuum retention is below the floor or the slowest reader's lag."""


def check_retention(cfg: KappaConfig, retention_h: int) -> None:
    """Refuse a retention that could delete files a reader still needs."""
    floor = max(cfg.loader.vacuum_floor_h, cfg.loader.slowest_reader_lag_h)
    if retention_h < floor:
        raise RetentionTooShort(
            f"vacuum retention {retention_h}h is below the floor of {floor}h (loader.vacuum_floor_h="
            f"{cfg.loader.vacuum_floor_h}, loader.slowest_reader_lag_h={cfg.loader.slowest_reader_lag_h}); "
            "a reader on an older snapshot would lose its files. Use --retention-h "
            f"{floor} or more (docs/runbooks/loader.md 'Maintenance')")


def _files(table: DeltaTable, column: str | None) -> tuple[int, int, Counter]:
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    per_partition: Counter = Counter(
        str(action.get(f"partition.{column}")) if column else "" for action in actions)
    return len(actions), sum(action["size_bytes"] for action in actions), per_partition


def _closed(value: str, today: date, open_days: int) -> bool:
    try:
        day = date.fromisoformat(value)
    except ValueError:
        return False
    return day < today - timedelta(days=open_days)


def maintain_table(cfg: KappaConfig, target: LoadTarget, retention_h: int, dry_run: bool) -> dict[str, Any]:
    """Compact and vacuum one table; files and bytes before and after."""
    storage = storage_options(cfg.lake)
    table = open_delta(target.uri, storage)
    report: dict[str, Any] = {"table": target.spec.name, "files_before": 0, "bytes_before": 0,
                              "files_after": 0, "bytes_after": 0, "compacted_partitions": [],
                              "vacuumed_files": 0, "files_per_partition_before": {}}
    if table is None:
        return report
    column = target.spec.date_column
    files, size, per_partition = _files(table, column)
    report |= {"files_before": files, "bytes_before": size, "files_per_partition_before": dict(per_partition)}
    today = datetime.now(UTC).date()
    due = sorted(value for value, count in per_partition.items()
                 if column and count >= cfg.loader.compact_min_files
                 and _closed(value, today, cfg.loader.open_partition_days))
    if column and not dry_run:
        for value in due:
            table.optimize.compact(partition_filters=[(column, "=", value)],
                                   target_size=cfg.loader.compact_target_mb * 1024 * 1024)
        table.update_incremental()
    removed = _vacuum(table, retention_h, dry_run)
    table.update_incremental()
    files, size, per_partition = _files(table, column)
    quarantine = open_delta(table_uri(cfg.lake.root, quarantine_name(target.spec.name)), storage)
    cleared = _vacuum(quarantine, retention_h, dry_run) if quarantine else []
    report |= {"files_after": files, "bytes_after": size, "compacted_partitions": due,
               "vacuumed_files": len(removed), "files_per_partition_after": dict(per_partition),
               "quarantine_vacuumed_files": len(cleared)}
    return report


def maintain_log(cfg: KappaConfig, name: str, retention_h: int, dry_run: bool) -> dict[str, Any]:
    """Compact one of the loader's log tables whole (unpartitioned) and vacuum it."""
    table = open_delta(table_uri(cfg.lake.root, name), storage_options(cfg.lake))
    report: dict[str, Any] = {"table": name, "files_before": 0, "bytes_before": 0, "files_after": 0,
                              "bytes_after": 0, "compacted_partitions": [], "vacuumed_files": 0}
    if table is None:
        return report
    files, size, _ = _files(table, None)
    report |= {"files_before": files, "bytes_before": size}
    if files >= cfg.loader.compact_min_files and not dry_run:
        table.optimize.compact(target_size=cfg.loader.compact_target_mb * 1024 * 1024)
        report["compacted_partitions"] = [""]
        table.update_incremental()
    removed = _vacuum(table, retention_h, dry_run)
    table.update_incremental()
    files, size, _ = _files(table, None)
    return report | {"files_after": files, "bytes_after": size, "vacuumed_files": len(removed)}


def _vacuum(table: DeltaTable, retention_h: int, dry_run: bool) -> list[str]:
    """Delete files older than the retention that the log no longer (or never) references.

    ``full=True``: also the files no commit ever referenced (a failed executor-path batch, a
    crashed run, a task attempt Spark retried); files younger than the retention stay, so a load
    still writing its files is never disturbed.
    """
    return table.vacuum(retention_hours=retention_h, dry_run=dry_run, enforce_retention_duration=False,
                        full=True)


def run_maintenance(cfg: KappaConfig, targets: list[LoadTarget], retention_h: int | None, dry_run: bool,
                    progress: Callable[[str], None] = lambda line: None) -> list[dict[str, Any]]:
    """Maintain every target (retention checked first: nothing runs when it is refused)."""
    hours = cfg.loader.vacuum_retention_h if retention_h is None else retention_h
    check_retention(cfg, hours)
    reports = []
    for target in targets:
        progress(f"{target.spec.name}: compacting closed partitions, vacuum retention {hours}h")
        reports.append(maintain_table(cfg, target, hours, dry_run))
    for name in LOGS:
        progress(f"{name}: compacting, vacuum retention {hours}h")
        reports.append(maintain_log(cfg, name, hours, dry_run))
    return reports
