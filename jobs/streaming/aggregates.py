"""Summary kinds, window sizes, and the DataFrame form of the summary increments.

The counting itself is :class:`jobs.streaming.records.Increments` (plain Python): the job runs it
inside each task of its one pass over a batch (:mod:`jobs.streaming.task`). Windowed aggregates
leave out rows flagged ``late``; all-time ones count every row (docs/streaming.md, "What counts").
:func:`summary_increments` is the same counting as a ``DataFrame -> DataFrame`` transform, for
backfills, notebooks and tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

if TYPE_CHECKING:
    from jobs.common.config import KappaConfig

Transform = Callable[[DataFrame], DataFrame]

CITY, TOPIC_MINUTE, TOPIC, MEMBER, MEMBER_ALL, EVENT = (
    "city", "topic_minute", "topic", "member", "member_all", "event")
MEMBERS_ADDED = "members_added"
"""A task added a window's members to its Redis HyperLogLog itself (``n``: ids added)."""
INCREMENT_COLUMNS = ("kind", "window_start", "item", "n", "no", "guests", "label")
IncrementRows: TypeAlias = pa.Table | Sequence[Mapping[str, Any]]
"""A batch's summed increment rows: a table of :data:`INCREMENT_COLUMNS`, or one dict per row."""
INCREMENT_INPUT = ("event_time_ms", "event_id", "event_name", "member_id", "response", "guests",
                   "topics", "city", "late")


@dataclass(frozen=True)
class Windows:
    """Window sizes in milliseconds (``streaming.*_s`` config times 1000)."""

    city_ms: int = 60_000
    trending_ms: int = 600_000
    trending_slide_ms: int = 60_000
    members_ms: int = 60_000

    def __post_init__(self) -> None:
        if self.trending_ms % self.trending_slide_ms:
            raise ValueError(f"trending window {self.trending_ms} ms is not a multiple of its slide "
                             f"{self.trending_slide_ms} ms")

    def sizes_ms(self) -> dict[str, int]:
        """The window size of each summary kind that has windows, as the summaries' read-back takes them."""
        return {"city": self.city_ms, "trending": self.trending_ms, "members": self.members_ms}


def windows_from(cfg: KappaConfig) -> Windows:
    """The window sizes of the config."""
    s = cfg.streaming
    return Windows(city_ms=s.city_window_s * 1000, trending_ms=s.trending_window_s * 1000,
                   trending_slide_ms=s.trending_slide_s * 1000, members_ms=s.members_window_s * 1000)


def _count_batches(windows: Windows) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from jobs.streaming.records import Increments

        increments = Increments(windows)
        for batch in batches:
            for record in batch.to_pylist():
                increments.add(record)
        rows = increments.rows()
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=increment_arrow_schema())

    return count


def increment_arrow_schema() -> pa.Schema:
    """The Arrow schema of increment rows (:data:`INCREMENT_SCHEMA`)."""
    return pa.schema([("kind", pa.string()), ("window_start", pa.int64()), ("item", pa.string()),
                      ("n", pa.int64()), ("no", pa.int64()), ("guests", pa.int64()),
                      ("label", pa.string())])


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


def summary_increments(windows: Windows) -> Transform:
    """Analyzed rows (:data:`INCREMENT_INPUT` columns at least) -> every summary increment.

    One row per (kind, window_start, item) with :data:`INCREMENT_COLUMNS`: counted per task by
    :class:`~jobs.streaming.records.Increments`, then summed across tasks.
    """

    def transform(df: DataFrame) -> DataFrame:
        per_task = df.select(*INCREMENT_INPUT).mapInArrow(_count_batches(windows), INCREMENT_SCHEMA)
        return (per_task.groupBy("kind", "window_start", "item")
                .agg(F.sum("n").alias("n"), F.sum("no").alias("no"), F.sum("guests").alias("guests"),
                     F.max("label").alias("label")))

    return transform
