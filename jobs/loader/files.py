"""Data files written outside delta-rs (the executor paths): Delta's partition layout and stats."""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from jobs.lake.storage import filesystem, on_s3

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def write_files(uri: str, table: pa.Table, partition_by: Sequence[str],
                storage: Mapping[str, str] | None = None) -> list[dict]:
    """Write ``table`` as one Parquet file per partition value under ``uri``; describe the files.

    ``storage``: the lake's storage options (jobs/lake/delta.py ``storage_options``).
    """
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if table.num_rows == 0:
        return []
    fs, root = filesystem(uri, storage)
    columns = list(partition_by)
    keys = table.select(columns).group_by(columns).aggregate([]).to_pylist() if columns else [{}]
    files = []
    for key in keys:
        part = table
        for column, value in key.items():
            match = pc.is_null(part[column]) if value is None else pc.equal(part[column], value)
            part = part.filter(match)
        values = {column: None if value is None else str(value) for column, value in key.items()}
        folder = "/".join(f"{column}={NULL_PARTITION if value is None else value}"
                          for column, value in values.items())
        relative = f"{folder}/part-{uuid.uuid4().hex}.parquet".lstrip("/")
        if not on_s3(uri):   # an object store has no folders (a marker object would be an orphan)
            fs.create_dir(f"{root}/{folder}".rstrip("/"), recursive=True)
        data = part.drop_columns(columns)
        pq.write_table(data, f"{root}/{relative}", filesystem=fs)
        files.append({"path": relative, "size": fs.get_file_info(f"{root}/{relative}").size,
                      "partition_values": json.dumps(values), "records": part.num_rows,
                      "stats": file_stats(data)})
    return files


STAT_TYPES = (pa.types.is_integer, pa.types.is_floating, pa.types.is_date, pa.types.is_timestamp)


def file_stats(data: pa.Table) -> str:
    """A data file's Delta stats, which readers skip files by (DuckDB over delta-rs, delta-spark).

    ``numRecords``, ``nullCount`` of every top-level column and ``minValues``/``maxValues`` of
    its numbers, dates, timestamps and strings of at most 32 characters.
    """
    import pyarrow.compute as pc

    nulls, low, high = {}, {}, {}
    for name, column in zip(data.column_names, data.columns, strict=True):
        nulls[name] = column.null_count
        kind = column.type
        ordered = any(test(kind) for test in STAT_TYPES) or pa.types.is_string(kind)
        if not ordered or column.null_count == len(column):
            continue
        extremes = pc.min_max(column)
        least, most = extremes["min"].as_py(), extremes["max"].as_py()
        if pa.types.is_string(kind) and max(len(least), len(most)) > 32:
            continue  # a cut string is no upper bound
        if pa.types.is_floating(kind) and (math.isnan(least) or math.isnan(most)):
            continue  # NaN
        low[name], high[name] = _stat(least, kind), _stat(most, kind, ceiling=True)
    return json.dumps({"numRecords": data.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls})


def _stat(value: Any, kind: pa.DataType, *, ceiling: bool = False) -> Any:
    if pa.types.is_timestamp(kind):  # milliseconds in the log: a maximum rounds up
        if ceiling and value.microsecond % 1000:
            value += dt.timedelta(microseconds=1000 - value.microsecond % 1000)
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    return value.isoformat() if pa.types.is_date(kind) else value
