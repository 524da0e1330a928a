"""The batch jobs' Delta edges: read pinned snapshots by partition, replace date partitions.

Reads take the live file list of one table version from its Delta log (delta-rs add actions,
never a listing of the folder) and read those Parquet files on the executors
(jobs/loader/merge.py ``read_files``), so a run never sees a partial load and the version it
read is known. Writes replace the run's date partitions in one delta-rs transaction (``mode=
"overwrite"`` with a predicate on the date column): readers see the old partitions or the new
ones, never both or none, and a re-run replaces them again with the same rows. Every function
takes the lake's ``storage`` options (jobs/lake/delta.py ``storage_options``: an S3 lake).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import date, timedelta
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError

from jobs.lake.delta import DeltaConflictError, DeltaError, open_delta
from jobs.lake.storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.batch.jobs import Source

logger = logging.getLogger(__name__)

READ_CHUNK_ROWS = 200_000


def snapshot_at(uri: str, version: int | None, storage: Storage | None = None) -> DeltaTable | None:
    """The table at ``version`` (None: the latest); None when no table exists there yet."""
    snapshot = open_delta(uri, storage, version)
    if snapshot is None and version is not None:
        raise DeltaError(f"{uri} has no table, so it has no version {version}")
    return snapshot


def partition_files(snapshot: DeltaTable, column: str | None, dates: Sequence[date]) -> list[dict]:
    """The snapshot's live files of the given dates (every file when ``column`` is None).

    Each item is ``path``, ``size``, ``partition_values`` (JSON) as jobs/loader/merge.py reads
    them, plus ``records`` from the file's stats.
    """
    from jobs.loader.merge import deletion_vectors, live_files

    if deletion_vectors(snapshot):
        raise DeltaError(f"{snapshot.table_uri} has deletion vectors: its files cannot be read as they "
                         "are; compact it (`kappa maintain`) or read it with delta-spark")
    wanted = {day.isoformat() for day in dates}
    actions = pa.table(snapshot.get_add_actions(flatten=True)).to_pylist()
    records = {item["path"]: item.get("num_records") or 0 for item in actions}
    files = live_files(snapshot)
    if column is not None:
        files = [item for item in files if json.loads(item["partition_values"]).get(column) in wanted]
    return [item | {"records": records.get(item["path"], 0)} for item in files]


def existing_files(uri: str, column: str, dates: Sequence[date],
                   storage: Storage | None = None) -> tuple[int | None, int]:
    """The table's latest version (None: no table yet) and its live files in the ``dates`` partitions."""
    snapshot = snapshot_at(uri, None, storage)
    if snapshot is None:
        return None, 0
    return snapshot.version(), len(partition_files(snapshot, column, dates))


def read_source(spark: SparkSession, uri: str, snapshot: DeltaTable | None, source: Source,
                dates: Sequence[date], *, storage: Storage | None = None) -> tuple[DataFrame, int]:
    """The source's rows of ``dates`` at the pinned snapshot, and how many rows that is."""
    from pyspark.sql.types import StructType

    from jobs.loader.merge import read_files
    from jobs.loader.scale import TaskPlan

    schema = StructType.fromDDL(source.columns)
    assert isinstance(schema, StructType)
    if snapshot is None:
        return spark.createDataFrame([], schema=schema), 0
    files = partition_files(snapshot, source.date_column, dates)
    if not files:
        return spark.createDataFrame([], schema=schema), 0
    plan = TaskPlan(source.table, uri, "", (), (), "fail", "", READ_CHUNK_ROWS, storage=dict(storage or {}))
    frame = read_files(spark.range(0), files, plan, schema)   # any frame of the session will do
    return frame, sum(item["records"] for item in files)


def date_predicate(column: str, dates: Sequence[date]) -> str:
    """SQL selecting exactly ``dates`` of ``column`` (a range when they are consecutive)."""
    ordered = sorted(set(dates))
    if not ordered:
        raise DeltaError("no dates to replace")
    consecutive = (ordered[-1] - ordered[0]).days == len(ordered) - 1
    if consecutive:
        end = ordered[-1] + timedelta(days=1)
        return f"{column} >= '{ordered[0].isoformat()}' AND {column} < '{end.isoformat()}'"
    return f"{column} IN ({', '.join(repr(day.isoformat()) for day in ordered)})"


def replace_partitions(uri: str, data: pa.Table, *, column: str, dates: Sequence[date],
                       metadata: Mapping[str, str], storage: Storage | None = None) -> int:
    """Replace the ``dates`` partitions of the table with ``data`` in one commit; the new version.

    Rows outside ``dates`` are an error (they would survive in no partition the predicate
    names). Dates without rows end up empty. The commit records ``metadata``. It is never
    retried on top of a commit that came in meanwhile (a concurrent run of the same dates, a
    compaction): delta-rs 1.6.6 lets a commit that removes files pass over a concurrent commit
    that already replaced them (docs/tables.md "Write paths"), which would leave a date twice,
    so such a run fails with :class:`DeltaConflictError` and is re-run.
    """
    days = {day for day in dates}
    found = {value for value in data.column(column).to_pylist()} - days if data.num_rows else set()
    if found:
        raise DeltaError(f"rows for {uri} fall outside the replaced dates: {sorted(found)[:5]}")
    properties = CommitProperties(custom_metadata=dict(metadata), max_commit_retries=0)
    try:
        write_deltalake(uri, _plain(data), mode="overwrite", predicate=date_predicate(column, dates),
                        partition_by=[column], schema_mode="merge", commit_properties=properties,
                        storage_options=dict(storage or {}))
    except CommitFailedError as exc:
        raise DeltaConflictError(
            f"replace of {len(days)} partitions of {uri} failed because another writer committed "
            f"first ({exc}); nothing of this write landed: re-run") from exc
    version = DeltaTable(uri, storage_options=dict(storage or {})).version()
    logger.info("batch replace uri=%s dates=%d rows=%d version=%d", uri, len(days), data.num_rows, version)
    return version


def _plain(data: pa.Table) -> pa.Table:
    """String views and large strings as plain strings: the same table schema from every engine."""
    plain = {pa.string_view(): pa.string(), pa.large_string(): pa.string()}
    fields = [field.with_type(plain.get(field.type, field.type)) for field in data.schema]
    return data.cast(pa.schema(fields))


def changed_partitions(uri: str, version: int, column: str, storage: Storage | None = None) -> list[str]:
    """The values of ``column`` whose files commit ``version`` added or removed (sorted).

    Read from the two snapshots' add actions (the live file lists before and after the commit),
    so a merge that moves a row to another date names both dates.
    """
    def files(at: int) -> dict[str, str | None]:
        if at < 0:
            return {}
        snapshot = DeltaTable(uri, version=at, storage_options=dict(storage or {}))
        actions = pa.table(snapshot.get_add_actions(flatten=False)).to_pylist()
        return {item["path"]: _text((item.get("partition") or {}).get(column)) for item in actions}

    before, after = files(version - 1), files(version)
    changed = {after[path] for path in after.keys() - before.keys()}
    changed |= {before[path] for path in before.keys() - after.keys()}
    return sorted(value for value in changed if value is not None)


def _text(value: object) -> str | None:
    return None if value is None else str(value)
