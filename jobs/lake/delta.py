"""``write_delta`` / ``open_delta``: the one Delta interface of every job, over two backends.

delta-rs (``deltalake``) is the backend tested here: Spark hands Arrow to the driver (or its
executors write Parquet files, see :func:`commit_files`) and delta-rs commits them. Each commit
can carry the Kafka offsets it covers as Delta *app transactions* (one ``app_id`` per
topic-partition, ``version`` = the next offset to load) plus commit metadata, in the same atomic
log entry as the data. Where delta-spark's jars are on the classpath
(``choose_backends(cfg).delta == "jvm"``) :func:`write_delta_spark` writes through
``format("delta")`` with ``txnAppId``/``txnVersion``.

Concurrency is optimistic: a write is based on the snapshot the caller loaded; two writers that
record the same app id conflict in Delta's commit protocol and the later one fails with
:class:`DeltaConflictError` instead of committing the same range twice.

Tables live on a local path or on S3 (``s3://bucket/prefix``): every function here takes the
lake's ``storage`` options (jobs/lake/storage.py, from ``lake.s3``). On S3 a commit is a
conditional put of the next log entry (``If-None-Match: *``), so two writers of one version
cannot both succeed without a locking provider (docs/deploy.md "The lake on S3").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, SchemaMismatchError, TableNotFoundError
from deltalake.exceptions import DeltaError as RustDeltaError

from jobs.errors import KappaError
from jobs.lake.storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)

WriteMode = Literal["append", "merge"]


class DeltaError(KappaError):
    """A Delta table cannot be read or written as asked."""


class DeltaConflictError(DeltaError):
    """Another writer committed first (optimistic concurrency); nothing of this write landed."""


class DeltaSchemaError(DeltaError):
    """The incoming data's schema is not an additive change of the table's schema."""

    exit_code = 3


@dataclass(frozen=True)
class Commit:
    """What one write records besides its rows.

    Attributes:
        app_versions: app id -> version (the loader: ``<table>/<topic>/<partition>`` -> next
            offset), committed as Delta app transactions in the same log entry.
        metadata: commit info (``custom_metadata``), e.g. the run id and the offset ranges.
    """

    app_versions: Mapping[str, int] = field(default_factory=dict)
    metadata: Mapping[str, str] = field(default_factory=dict)

    def properties(self) -> CommitProperties:
        """delta-rs commit properties.

        A commit that records app versions is never retried on top of a newer table version:
        delta-rs 1.6.6 rebases a failed *create* (read version: none) onto the other writer's
        version 0 without checking the app ids (found by the concurrent-load test), so such a
        commit fails instead and the run reports a conflict.
        """
        txns = [Transaction(app_id, int(version)) for app_id, version in sorted(self.app_versions.items())]
        retries = 0 if txns else None
        return CommitProperties(app_transactions=txns, custom_metadata=dict(self.metadata),
                                max_commit_retries=retries)


def table_uri(root: str, name: str) -> str:
    """Where table ``schema.table`` lives under the lake root (``<root>/<schema>/<table>``)."""
    schema, _, table = name.partition(".")
    if not table:
        raise DeltaError(f"table name {name!r} must be <schema>.<table>, e.g. bronze.events_raw")
    return f"{root.rstrip('/')}/{schema}/{table}"


def open_delta(uri: str, storage: Storage | None = None, version: int | None = None) -> DeltaTable | None:
    """The table's latest snapshot (or ``version``), or None when no table exists there yet."""
    try:
        return DeltaTable(uri, version=version, storage_options=dict(storage or {}))
    except TableNotFoundError:
        return None


def _latest_version(uri: str, storage: Storage | None) -> int:
    return DeltaTable(uri, storage_options=dict(storage or {})).version()


def app_version(table: DeltaTable | None, app_id: str) -> int | None:
    """The version recorded for ``app_id`` in this snapshot (None: never committed)."""
    return None if table is None else table.transaction_version(app_id)


def write_delta(uri: str, data: pa.Table, *, snapshot: DeltaTable | None, mode: WriteMode = "append",
                partition_by: Sequence[str] = (), merge_keys: Sequence[str] = (),
                merge_condition: str | None = None, commit: Commit | None = None,
                exclusive_create: bool = True, storage: Storage | None = None) -> int:
    """Commit ``data`` to the table in one Delta transaction; return the new table version.

    Args:
        uri: the table's location.
        data: the rows (Arrow).
        snapshot: the snapshot the caller planned against (None when the table did not exist);
            the commit is based on it, so a concurrent commit of the same app ids conflicts.
        mode: ``append``, or ``merge`` (upsert on ``merge_keys``: matched rows are replaced when
            ``merge_condition`` holds, e.g. ``s.mtime >= t.mtime``; unmatched rows inserted). A
            merge that changes no row still commits ``commit``'s app versions (offsets only).
        partition_by: partition columns (used when the table is created).
        merge_keys: key columns of a merge.
        merge_condition: extra condition (aliases ``s`` source, ``t`` target) for updates.
        commit: app transactions and commit metadata recorded with the rows.
        exclusive_create: with ``snapshot=None``, fail (conflict) if someone created the table
            meanwhile, instead of appending to a snapshot nobody planned against (the loader);
            False for logs appended by many runs (audit, quality results).
        storage: the lake's storage options (jobs/lake/storage.py).
    """
    props = (commit or Commit()).properties()
    if snapshot is not None:
        _check_schema(uri, snapshot, data.schema)
    try:
        if mode == "merge" and snapshot is not None:
            predicate = " AND ".join(f"t.{key} = s.{key}" for key in merge_keys)
            metrics = (snapshot.merge(data, predicate, source_alias="s", target_alias="t", merge_schema=True,
                                      commit_properties=props)
                       .when_matched_update_all(predicate=merge_condition).when_not_matched_insert_all()
                       .execute()) if data.num_rows else {}
            if commit is not None and commit.app_versions and not _merge_changed(metrics):
                return commit_files(uri, [], pa.schema(snapshot.schema().to_arrow()), snapshot=snapshot,
                                    partition_by=partition_by, commit=commit, storage=storage)
        else:
            create: Literal["error", "append"] = (
                "error" if snapshot is None and exclusive_create else "append")
            write_deltalake(snapshot if snapshot is not None else uri, data, mode=create,
                            partition_by=list(partition_by) or None, schema_mode="merge",
                            commit_properties=props, storage_options=dict(storage or {}))
    except CommitFailedError as exc:
        raise DeltaConflictError(
            f"commit to {uri} failed because another writer committed first ({exc}); nothing of "
            "this write landed: re-run, it starts from what the other writer recorded") from exc
    except SchemaMismatchError as exc:
        raise DeltaSchemaError(f"schema of the data does not fit {uri}: {exc}") from exc
    except RustDeltaError as exc:
        if "already exists" not in str(exc):
            raise
        raise DeltaConflictError(
            f"commit to {uri} failed because another writer committed first (it created the table "
            "meanwhile); nothing of this write landed: re-run, it starts from what the other writer "
            "recorded") from exc
    version = _latest_version(uri, storage)
    logger.info("delta commit uri=%s mode=%s rows=%d version=%d", uri, mode, data.num_rows, version)
    return version


def _merge_changed(metrics: Mapping[str, Any]) -> bool:
    """Whether a delta-rs merge committed.

    It makes no commit when it adds and removes no file (an empty source, or every source row
    matched and none newer), so the caller records the offsets in a commit of their own.
    """
    return bool(metrics.get("num_target_files_added") or metrics.get("num_target_files_removed"))


def _check_schema(uri: str, table: DeltaTable, incoming: pa.Schema) -> None:
    """Additive columns merge; a changed type or a dropped column fails with the difference."""
    current = pa.schema(table.schema().to_arrow())
    problems: list[str] = []
    for existing in current:
        if existing.name not in incoming.names:
            problems.append(f"column {existing.name!r} ({existing.type}) is missing")
            continue
        new_type = incoming.field(existing.name).type
        if not _same_type(existing.type, new_type):
            problems.append(f"column {existing.name!r} changes type {existing.type} -> {new_type}")
    if problems:
        raise DeltaSchemaError(
            f"non-additive schema change for {uri}: {'; '.join(problems)}. Only new nullable "
            "columns merge automatically; bump the source's schema_version and load it into a new "
            "table (or migrate this one) as docs/tables.md 'Schema changes' describes")


def _same_type(a: pa.DataType, b: pa.DataType) -> bool:
    views = {pa.string_view(): pa.string(), pa.large_string(): pa.string(),
             pa.binary_view(): pa.binary(), pa.large_binary(): pa.binary()}
    norm_a, norm_b = views.get(a, a), views.get(b, b)
    if pa.types.is_timestamp(norm_a) and pa.types.is_timestamp(norm_b):
        return True
    if isinstance(norm_a, pa.StructType | pa.ListType | pa.LargeListType):
        return norm_a.num_fields == norm_b.num_fields if type(norm_a) is type(norm_b) else False
    return bool(norm_a == norm_b)


def commit_files(uri: str, actions: list[Any], schema: pa.Schema, *, snapshot: DeltaTable | None,
                 partition_by: Sequence[str], commit: Commit, removed: Sequence[str] = (),
                 storage: Storage | None = None) -> int:
    """Commit Parquet files that executors already wrote under ``uri`` (the executor write path).

    Same contract as :func:`write_delta` in append mode: based on ``snapshot`` (None: create the
    table, failing if someone else did meanwhile), ``commit``'s app transactions in the same log
    entry, a lost race raises :class:`DeltaConflictError`. An empty ``actions`` commits only the
    offsets. ``actions`` may remove files (an executor merge rewrites them): ``removed`` names
    them, and :func:`_still_live` checks them first, because delta-rs lets such a commit pass
    over a concurrent compaction that already replaced them (measured with deltalake 1.6.6).
    """
    from deltalake import Schema as DeltaSchema
    from deltalake.transaction import create_table_with_add_actions

    props = commit.properties()
    try:
        if snapshot is None:
            create_table_with_add_actions(uri, DeltaSchema.from_arrow(schema), actions, mode="error",
                                          partition_by=list(partition_by) or None,
                                          commit_properties=props, storage_options=dict(storage or {}))
        else:
            _check_schema(uri, snapshot, schema)
            snapshot = _still_live(uri, snapshot, removed, commit, storage) if removed else snapshot
            snapshot.create_write_transaction(actions, "append", schema,
                                              partition_by=list(partition_by) or None,
                                              commit_properties=props)
    except CommitFailedError as exc:
        raise DeltaConflictError(f"commit of {len(actions)} files to {uri} failed because another "
                                 f"writer committed first ({exc}); nothing of this write landed (its "
                                 "files stay unreferenced until vacuum): re-run") from exc
    except RustDeltaError as exc:
        if "already exists" not in str(exc):
            raise
        raise DeltaConflictError(
            f"commit of {len(actions)} files to {uri} failed because another writer committed first "
            "(it created the table meanwhile); nothing of this write landed: re-run") from exc
    version = _latest_version(uri, storage)
    logger.info("delta commit uri=%s files=%d version=%d", uri, len(actions), version)
    return version


def _still_live(uri: str, snapshot: DeltaTable, removed: Sequence[str], commit: Commit,
                storage: Storage | None) -> DeltaTable:
    """The version to commit on: the newest, if the merge's premises still hold there.

    Every file in ``removed`` must still be live and no commit since ``snapshot`` may have
    recorded ``commit``'s app ids; else :class:`DeltaConflictError`.
    """
    newest = DeltaTable(uri, storage_options=dict(storage or {}))
    if newest.version() == snapshot.version():
        return snapshot
    live = set(pa.table(newest.get_add_actions(flatten=True)).column("path").to_pylist())
    gone = [path for path in removed if path not in live]
    moved = [app for app in commit.app_versions
             if newest.transaction_version(app) != snapshot.transaction_version(app)]
    if gone or moved:
        raise DeltaConflictError(
            f"commit to {uri} failed because another writer committed first (version {newest.version()} "
            f"replaced {len(gone)} of the files this merge rewrites, moved {len(moved)} of its offsets); "
            "nothing of this write landed (its files stay unreferenced until vacuum): re-run")
    return newest


def readable_datasets(table: DeltaTable) -> list[Any]:
    """The table's live files as pyarrow datasets, one per set of column types found in them.

    delta-rs merges write string columns as ``string_view`` while the table's schema (and the
    files of appends) say ``string``; pyarrow has no kernel comparing the two, so a filter pushed
    into one dataset over both fails ("Function 'equal' has no kernel matching input types
    (string, string_view)"). Each dataset here declares its files' own types; a reader unions
    them by column name (``kappa sql``: jobs/loader/sql.py). Costs one footer read per file.
    """
    whole = table.to_pyarrow_dataset()
    groups: dict[str, tuple[pa.Schema, list[Any]]] = {}
    for fragment in whole.get_fragments():
        physical = fragment.physical_schema
        schema = pa.schema([physical.field(item.name) if item.name in physical.names else item
                            for item in whole.schema])
        groups.setdefault(str(schema), (schema, []))[1].append(fragment)
    if len(groups) <= 1 and all(schema.equals(whole.schema) for schema, _ in groups.values()):
        return [whole]
    import pyarrow.dataset as ds

    return [ds.FileSystemDataset(fragments, schema, whole.format, whole.filesystem)
            for schema, fragments in groups.values()]


def write_delta_spark(df: DataFrame, uri: str, *, partition_by: Sequence[str], app_id: str,
                      version: int, metadata: str) -> None:
    """The delta-spark route (jars present): one append with ``txnAppId``/``txnVersion``.

    delta-spark records one app id per write, so the JVM route keys it by table and keeps the
    per-partition offsets in ``userMetadata``; it runs wherever the jars exist (not here).
    """
    (df.write.format("delta").mode("append").partitionBy(*partition_by)
     .option("txnAppId", app_id).option("txnVersion", version).option("userMetadata", metadata)
     .option("mergeSchema", "true").save(uri))


def local_path(uri: str) -> Path | None:
    """The filesystem path of a local table URI (None for object stores)."""
    if "://" in uri and not uri.startswith("file://"):
        return None
    return Path(uri.removeprefix("file://"))
