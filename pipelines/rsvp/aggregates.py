"""Window sizes of the RSVP summaries, and the DataFrame form of their increments.

The counting itself is :class:`pipelines.rsvp.records.Increments` (plain Python): the streaming
job runs it inside each task of its one pass over a batch (jobs/streaming/task.py). Windowed
aggregates leave out rows flagged ``late``; all-time ones count every row (docs/streaming.md,
"What counts"). :func:`summary_increments` is the same counting as a ``DataFrame -> DataFrame``
transform, for backfills, notebooks and tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.errors import ConfigError
from jobs.streaming.aggregates import INCREMENT_SCHEMA, SUMS, increment_arrow_schema

if TYPE_CHECKING:
    from jobs.config.load import KappaConfig

Transform = Callable[[DataFrame], DataFrame]

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


PARAMS = ("city_window_s", "trending_window_s", "trending_slide_s", "members_window_s", "event_ttl_s")
"""The pipeline's ``params`` (pipeline.yaml; config ``streaming.params.<name>``): seconds, at least 1."""


def param(cfg: KappaConfig, name: str) -> int:
    """One of :data:`PARAMS` from the config (``streaming.params``, whose defaults are pipeline.yaml's)."""
    value = cfg.streaming.params.get(name)
    try:
        seconds = int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = 0
    if seconds < 1 or str(seconds) != str(value).strip():
        raise ConfigError(f"streaming.params.{name} is {value!r}; the RSVP pipeline needs a whole number of "
                          "seconds, at least 1 (pipelines/rsvp/pipeline.yaml `params:`)")
    return seconds


def windows_from(cfg: KappaConfig) -> Windows:
    """The window sizes of the config."""
    def ms(name: str) -> int:
        return param(cfg, name) * 1000

    return Windows(city_ms=ms("city_window_s"), trending_ms=ms("trending_window_s"),
                   trending_slide_ms=ms("trending_slide_s"), members_ms=ms("members_window_s"))


def _count_batches(windows: Windows) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pipelines.rsvp.records import Increments

        increments = Increments(windows)
        for batch in batches:
            for record in batch.to_pylist():
                increments.add(record)
        rows = increments.rows()
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=increment_arrow_schema())

    return count


def summary_increments(windows: Windows) -> Transform:
    """Analyzed rows (:data:`INCREMENT_INPUT` columns at least) -> every summary increment.

    One row per (kind, window_start, item) with ``INCREMENT_COLUMNS``: counted per task by
    :class:`~pipelines.rsvp.records.Increments`, then summed across tasks.
    """

    def transform(df: DataFrame) -> DataFrame:
        per_task = df.select(*INCREMENT_INPUT).mapInArrow(_count_batches(windows), INCREMENT_SCHEMA)
        return (per_task.groupBy("kind", "window_start", "item")
                .agg(*(F.sum(name).alias(name) for name in SUMS), F.max("label").alias("label")))

    return transform
