"""Summary increments: the rows a task's counting returns and the Redis sink applies.

The counting itself is the pipeline's (its codec's ``counter``, :mod:`jobs.streaming.codec`):
the job runs it inside each task of its one pass over a batch (:mod:`jobs.streaming.task`).
Each row is one (kind, window start, item) with three integer sums (``n``, ``n2``, ``n3``) and a
text ``label`` (the greatest wins); the kinds, and what each sum means, are the pipeline's
(its Redis views, :class:`jobs.streaming.codec.RedisViews`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema

MEMBERS_ADDED = "members_added"
"""A task added a window's distinct items to its Redis HyperLogLog itself (``n``: items added)."""
SUMS = ("n", "n2", "n3")
"""The integer sums of an increment row, added up across tasks."""
INCREMENT_COLUMNS = ("kind", "window_start", "item", *SUMS, "label")
IncrementRows: TypeAlias = pa.Table | Sequence[Mapping[str, Any]]
"""A batch's summed increment rows: a table of :data:`INCREMENT_COLUMNS`, or one dict per row."""


def increment_row(kind: str, start: int, item: str, n: int, n2: int = 0, n3: int = 0,  # noqa: PLR0917
                  label: str | None = None) -> dict[str, Any]:
    """One increment row as a dict."""
    return {"kind": kind, "window_start": start, "item": item, "n": n, "n2": n2, "n3": n3, "label": label}


def increment_arrow_schema() -> pa.Schema:
    """The Arrow schema of increment rows (:data:`INCREMENT_SCHEMA`)."""
    return pa.schema([("kind", pa.string()), ("window_start", pa.int64()), ("item", pa.string()),
                      *((name, pa.int64()) for name in SUMS), ("label", pa.string())])


def increments_table(increments: IncrementRows) -> pa.Table:
    """Increment rows as one table of :func:`increment_arrow_schema` (given as dicts, or a table)."""
    schema = increment_arrow_schema()
    if not isinstance(increments, pa.Table):
        return pa.Table.from_pylist(list(increments), schema=schema)
    if increments.schema != schema:   # e.g. large_string columns, or columns in another order
        increments = increments.select(list(INCREMENT_COLUMNS)).cast(schema)
    return increments


INCREMENT_SCHEMA = from_arrow_schema(increment_arrow_schema())
"""Increment rows as the StructType ``mapInArrow`` is given: a DDL string would be parsed in the
JVM on every call (30 ms per micro-batch on the driver, measured with py-spy;
docs/explanation/streaming-performance.md)."""
