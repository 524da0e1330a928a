"""The executor path of merge tables: an upsert on the key without rows reaching the driver.

A merge table (a pipeline's silver records, its summaries) keeps one row per key (the spec's
``newer`` condition decides which). On this path, in Spark jobs on the executors:

1. **Check** (:func:`check_on_executors`): the batch, hash-partitioned and sorted by the key, runs
   the suite's chunked rules (the key's uniqueness included: jobs/loader/chunks.py); failing rows
   go to quarantine files, the good rows stay on the executors (persisted) and only the rules'
   reports come back. The driver judges the batch as on every other path.
2. **Match** (:func:`merge_on_executors`): the key columns (and the columns ``newer`` compares) of
   every live file of the snapshot the batch was planned from are read on the executors and
   joined with the good rows: a row with no match is inserted, a matched row replaces the stored
   one when ``newer`` holds (the file holding it is *touched*) and is dropped otherwise. Only the
   touched files' paths come back.
3. **Rewrite**: the new rows plus the touched files' rows that no new row replaces are written as
   new files (one per partition value and chunk); the driver commits them with the touched
   files' removal and the Kafka offsets in one Delta transaction (jobs/lake/delta.py
   ``commit_files``, which also refuses to commit when a touched file was removed meanwhile).

Files are read by the snapshot's add actions, never by listing the folder; a table with deletion
vectors is not read this way (``deletion_vectors``: its batches take the driver path).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa

from jobs.lake.storage import filesystem
from jobs.loader.files import write_files
from jobs.loader.scale import (
    DATA,
    GOOD,
    REPORT_DDL,
    REPORT_SCHEMA,
    TaskPlan,
    Written,
    check,
    chunks,
    keyed,
    written,
)

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

REPORT, FILE, ACTION = "_kappa_report", "_kappa_file", "_kappa_action"
INSERT, UPDATE, SKIP = "insert", "update", "skip"


def deletion_vectors(snapshot: DeltaTable | None) -> bool:
    """Whether the table may hold deletion vectors (its files then cannot be read as they are)."""
    if snapshot is None:
        return False
    protocol = snapshot.protocol()
    return "deletionVectors" in (protocol.reader_features or [])


def check_on_executors(frame: DataFrame, plan: TaskPlan) -> tuple[DataFrame, DataFrame, Written]:
    """Step 1: the checked rows as persisted, the good rows among them, and the reports.

    The caller unpersists the checked rows when the batch is done (committed or not).
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    from jobs.loader.scale import arrow_schema

    data = arrow_schema(frame)
    out = StructType([*frame.schema.fields, StructField(REPORT, StringType())])
    checked = keyed(frame, plan).mapInArrow(_checker(plan, data), out).persist(StorageLevel.MEMORY_AND_DISK)
    reports = checked.where(F.col(REPORT).isNotNull()).select(REPORT).collect()
    good = checked.where(F.col(REPORT).isNull()).drop(REPORT)
    return checked, good, written(json.loads(row[0]) for row in reports)


Task = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def _checker(plan: TaskPlan, data: pa.Schema) -> Task:
    out = data.append(pa.field(REPORT, pa.string()))

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for chunk in chunks(batches, plan.chunk_rows, plan.keys):
            reports, good = check(plan, chunk)
            if good is not None:
                reports.append({"kind": GOOD, "records": good.num_rows})
            if reports:  # one row per report, its data columns null
                texts = pa.array([json.dumps(report) for report in reports], pa.string())
                yield pa.RecordBatch.from_arrays(
                    [pa.nulls(len(texts), field.type) for field in data] + [texts], schema=out)
            if good is not None and good.num_rows:
                rows = good.cast(data).append_column(REPORT, pa.nulls(good.num_rows, pa.string()))
                yield from rows.to_batches()

    return run


def merge_on_executors(good: DataFrame, snapshot: DeltaTable | None, plan: TaskPlan, *,
                       keys: tuple[str, ...], newer: str | None) -> tuple[list[dict], list[dict]]:
    """Steps 2 and 3: the new files' reports, and the touched files the commit removes.

    A touched file is described by ``path``, ``size`` and ``partition_values``.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    files = live_files(snapshot)
    if not files:
        return write_rows(good, plan), []
    compared = sorted(set(re.findall(r"\bt\.(\w+)", newer or "")) - set(keys))
    columns = [good.schema[name] for name in (*keys, *compared)]
    wanted = StructType([*columns, StructField(FILE, StringType())])
    stored = read_files(good, files, plan, wanted)
    source, target = good.alias("s"), stored.alias("t")
    matched = F.col(f"t.{FILE}").isNotNull()
    action = F.when(~matched, INSERT).when(F.expr(newer) if newer else F.lit(True), UPDATE).otherwise(SKIP)
    decided = (source.join(target, [F.col(f"s.{key}") == F.col(f"t.{key}") for key in keys], "left")
               .select("s.*", F.col(f"t.{FILE}").alias(FILE), action.alias(ACTION))
               .persist(StorageLevel.MEMORY_AND_DISK))
    try:
        updates = decided.where(F.col(ACTION) == UPDATE)
        touched = {row[0] for row in updates.select(FILE).distinct().collect()}
        rows = decided.where(F.col(ACTION) != SKIP).drop(FILE, ACTION)
        if touched:
            kept = read_files(good, [item for item in files if item["path"] in touched], plan, good.schema)
            rows = rows.unionByName(kept.join(updates.select(*keys), list(keys), "left_anti"))
        return write_rows(rows, plan), [item for item in files if item["path"] in touched]
    finally:
        decided.unpersist()


def live_files(snapshot: DeltaTable | None) -> list[dict]:
    """The snapshot's data files: ``path`` (as in the log), ``size``, ``partition_values`` (JSON)."""
    if snapshot is None:
        return []
    actions = pa.table(snapshot.get_add_actions(flatten=False)).to_pylist()
    return [{"path": item["path"], "size": item["size_bytes"],
             "partition_values": json.dumps({key: None if value is None else str(value)
                                             for key, value in (item.get("partition") or {}).items()})}
            for item in actions]


def read_files(frame: DataFrame, files: list[dict], plan: TaskPlan, schema: StructType) -> DataFrame:
    """The rows of ``files`` in the columns of ``schema``, read on the executors.

    ``_kappa_file`` names each row's file; partition columns come from the add actions' values,
    columns a file lacks are nulls.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    spark = frame.sparkSession
    slices = max(1, min(len(files), spark.sparkContext.defaultParallelism * 2))
    listing = spark.createDataFrame([(item["path"], item["partition_values"]) for item in files],
                                    "path string, partition_values string").repartition(slices)
    return listing.mapInArrow(_reader(plan, to_arrow_schema(schema, timezone="UTC")), schema)


def _reader(plan: TaskPlan, out: pa.Schema) -> Task:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        fs, root = filesystem(plan.uri, plan.storage)
        for batch in batches:
            paths, values = batch["path"].to_pylist(), batch["partition_values"].to_pylist()
            for path, value in zip(paths, values, strict=True):
                parts = json.loads(value)
                location = path if "://" in path else f"{root}/{unquote(path)}"
                parquet = pq.ParquetFile(location, filesystem=fs)
                present = [name for name in out.names if name in parquet.schema_arrow.names]
                for piece in parquet.iter_batches(batch_size=plan.chunk_rows, columns=present):
                    yield _conform(piece, out, parts, path)

    return run


def _conform(piece: pa.RecordBatch, out: pa.Schema, parts: dict[str, Any], path: str) -> pa.RecordBatch:
    rows, arrays = piece.num_rows, []
    for field in out:
        if field.name == FILE:
            arrays.append(pa.array([path] * rows, pa.string()))
        elif field.name in parts:
            arrays.append(pa.array([parts[field.name]] * rows, pa.string()).cast(field.type))
        elif field.name in piece.schema.names:
            arrays.append(piece[field.name].cast(field.type))
        else:
            arrays.append(pa.nulls(rows, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=out)


def write_rows(rows: DataFrame, plan: TaskPlan) -> list[dict]:
    """Write ``rows`` (already checked) as the table's files, grouped by partition value."""
    grouped = rows.repartition(*plan.partition_by) if plan.partition_by else rows
    reports = [row.asDict() for row in grouped.mapInArrow(_writer(plan), REPORT_DDL).collect()]
    return [report for report in reports if report["kind"] == DATA]


def _writer(plan: TaskPlan) -> Task:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for chunk in chunks(batches, plan.chunk_rows):
            files = write_files(plan.uri, chunk, plan.partition_by, plan.storage)
            yield pa.RecordBatch.from_pylist([{"kind": DATA, **item} for item in files], schema=REPORT_SCHEMA)

    return run


def remove_actions(files: list[dict]) -> list[Any]:
    """Delta remove actions of the touched files."""
    import time

    from deltalake.transaction import RemoveAction

    now_ms = int(time.time() * 1000)
    return [RemoveAction(item["path"], True, now_ms, item["size"], json.loads(item["partition_values"]))
            for item in files]
