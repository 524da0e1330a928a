"""The scale path: executors write the Parquet data files, the driver commits them once.

On a cluster the driver must not receive every row. ``mapInArrow`` runs on the executors: each
task writes its rows as Parquet files under the table (one per partition value, Delta's
``<column>=<value>/`` layout, partition columns left out of the file) and returns one small row
per file (path, size, partition values, record count). The driver turns those rows into Delta
add actions and commits them with the Kafka offsets in one transaction
(:func:`jobs.common.delta.commit_files`). Files of a task that fails or of a commit that loses a
conflict are never referenced by the log, and vacuum removes them.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.common.delta import Commit, commit_files

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame

FILE_ROW = "path string, size long, partition_values string, records long"


def _writer(uri: str, partition_by: Sequence[str]):
    """The per-task function: Arrow batches in, one row per written file out."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc
        import pyarrow.fs as pafs
        import pyarrow.parquet as pq

        table = pa.Table.from_batches(list(batches))
        if table.num_rows == 0:
            return
        filesystem, root = pafs.FileSystem.from_uri(uri if "://" in uri else f"file://{uri}")
        keys = table.select(list(partition_by)).group_by(list(partition_by)).aggregate([]).to_pylist() \
            if partition_by else [{}]
        rows = []
        for key in keys:
            part = table
            for column, value in key.items():
                part = part.filter(pc.equal(part[column], pa.scalar(value, part.schema.field(column).type)))
            values = {column: None if value is None else str(value) for column, value in key.items()}
            folder = "/".join(f"{column}={value}" for column, value in values.items())
            relative = f"{folder}/part-{uuid.uuid4().hex}.parquet".lstrip("/")
            filesystem.create_dir(f"{root}/{folder}".rstrip("/"), recursive=True)
            pq.write_table(part.drop_columns(list(partition_by)), f"{root}/{relative}", filesystem=filesystem)
            size = filesystem.get_file_info(f"{root}/{relative}").size
            rows.append({"path": relative, "size": size, "partition_values": json.dumps(values),
                         "records": part.num_rows})
        yield pa.RecordBatch.from_pylist(rows)

    return write


def write_via_executors(df: DataFrame, uri: str, *, snapshot: DeltaTable | None,
                        partition_by: Sequence[str], commit: Commit) -> tuple[int, int]:
    """Write ``df`` as data files on the executors; commit them on the driver. Return (rows, version)."""
    from deltalake.transaction import AddAction
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(df.schema, timezone="UTC")
    files = df.mapInArrow(_writer(uri, partition_by), FILE_ROW).collect()
    now_ms = int(time.time() * 1000)
    actions: list[Any] = [
        AddAction(row["path"], row["size"], json.loads(row["partition_values"]), now_ms, True,
                  json.dumps({"numRecords": row["records"]}))
        for row in files]
    version = commit_files(uri, actions, schema, snapshot=snapshot, partition_by=partition_by,
                           commit=commit)
    return sum(row["records"] for row in files), version
