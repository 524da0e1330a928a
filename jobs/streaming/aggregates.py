"""Pure aggregations of analyzed RSVPs into the increments the summaries are built from.

Input: rows of the analyzed schema (:func:`jobs.streaming.transforms.analyzed`). Windowed
aggregates leave out rows flagged ``late``; all-time ones count every row (docs/streaming.md,
"What counts"). :func:`summary_increments` unions them into one narrow shape so that a batch
needs one Spark job to collect them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

Transform = Callable[[DataFrame], DataFrame]

CITY, TOPIC_MINUTE, TOPIC, MEMBER, MEMBER_ALL, EVENT = (
    "city", "topic_minute", "topic", "member", "member_all", "event")
INCREMENT_COLUMNS = ("kind", "window_start", "item", "n", "no", "guests", "label")


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


def window_start(event_ms: Column, size_ms: int) -> Column:
    """The start of the tumbling window of ``size_ms`` holding ``event_ms``."""
    return F.floor(event_ms / F.lit(size_ms)).cast("long") * F.lit(size_ms)


def on_time(df: DataFrame) -> DataFrame:
    """Rows that are not behind the watermark."""
    return df.where(~F.col("late"))


def city_counts(size_ms: int) -> Transform:
    """RSVPs per (tumbling window start, city), on-time rows only."""

    def transform(df: DataFrame) -> DataFrame:
        return (df.transform(on_time)
                .groupBy(window_start(F.col("event_time_ms"), size_ms).alias("window_start"), "city")
                .agg(F.count(F.lit(1)).alias("count")))

    return transform


def sliding_starts(event_ms: Column, size_ms: int, slide_ms: int) -> Column:
    """Starts of every sliding window of ``size_ms`` (every ``slide_ms``) holding ``event_ms``."""
    last = window_start(event_ms, slide_ms)
    steps = size_ms // slide_ms
    return F.transform(F.sequence(F.lit(0), F.lit(steps - 1)),
                       lambda k: last - k.cast("long") * F.lit(slide_ms))


def trending_counts(size_ms: int, slide_ms: int) -> Transform:
    """RSVPs per (sliding window start, topic name), on-time rows only."""

    def transform(df: DataFrame) -> DataFrame:
        exploded = (df.transform(on_time)
                    .select(F.explode(sliding_starts(F.col("event_time_ms"), size_ms, slide_ms))
                            .alias("window_start"), "topics")
                    .select("window_start", F.explode("topics").alias("topic")))
        return exploded.groupBy("window_start", "topic").agg(F.count(F.lit(1)).alias("count"))

    return transform


def topic_counts(df: DataFrame) -> DataFrame:
    """All-time RSVPs per topic name (late rows included)."""
    return (df.select(F.explode("topics").alias("topic"))
            .groupBy("topic").agg(F.count(F.lit(1)).alias("count")))


def window_members(size_ms: int) -> Transform:
    """Distinct (tumbling window start, member id) pairs, on-time rows only."""

    def transform(df: DataFrame) -> DataFrame:
        return (df.transform(on_time)
                .select(window_start(F.col("event_time_ms"), size_ms).alias("window_start"), "member_id")
                .distinct())

    return transform


def event_responses(df: DataFrame) -> DataFrame:
    """Per event: yes and no responses, and guests brought by yes responses (late included)."""
    yes = F.col("response") == "yes"
    return df.groupBy("event_id").agg(
        F.sum(F.when(yes, 1).otherwise(0)).cast("long").alias("yes"),
        F.sum(F.when(yes, 0).otherwise(1)).cast("long").alias("no"),
        F.sum(F.when(yes, F.col("guests")).otherwise(0)).cast("long").alias("guests"),
        F.max("event_name").alias("event_name"),
    )


def _increment(kind: str, window: Column, item: Column, *, n: Column | None = None,
               no: Column | None = None, guests: Column | None = None,
               label: Column | None = None) -> Column:
    zero = F.lit(0).cast("long")
    return F.struct(F.lit(kind).alias("kind"), window.cast("long").alias("window_start"),
                    item.cast("string").alias("item"),
                    (n if n is not None else F.lit(1)).cast("long").alias("n"),
                    (no if no is not None else zero).cast("long").alias("no"),
                    (guests if guests is not None else zero).cast("long").alias("guests"),
                    (label if label is not None else F.lit(None)).cast("string").alias("label"))


def increment_rows(windows: Windows) -> Transform:
    """One row per (record, summary it feeds): the input of :func:`summary_increments`.

    Windowed kinds (``city``, ``topic_minute``, ``member``) only for on-time records; all-time
    kinds (``topic``, ``member_all``, ``event``) for every record. Trending windows are built in
    Redis from per-slide ``topic_minute`` buckets, so a record feeds one bucket per topic instead
    of every sliding window holding it.
    """

    def transform(df: DataFrame) -> DataFrame:
        on = ~F.col("late")
        yes = F.col("response") == "yes"
        minute = window_start(F.col("event_time_ms"), windows.trending_slide_ms)
        per_topic = F.transform("topics", lambda t: F.array(
            _increment(TOPIC, F.lit(0), t),
            F.when(on, _increment(TOPIC_MINUTE, minute, t))))
        fixed = F.array(
            F.when(on, _increment(CITY, window_start(F.col("event_time_ms"), windows.city_ms),
                                  F.col("city"))),
            F.when(on, _increment(MEMBER, window_start(F.col("event_time_ms"), windows.members_ms),
                                  F.col("member_id"))),
            _increment(MEMBER_ALL, F.lit(0), F.col("member_id")),
            _increment(EVENT, F.lit(0), F.col("event_id"), n=F.when(yes, 1).otherwise(0),
                       no=F.when(yes, 0).otherwise(1), guests=F.when(yes, F.col("guests")).otherwise(0),
                       label=F.col("event_name")),
        )
        everything = F.concat(fixed, F.flatten(per_topic))
        return (df.select(F.explode(everything).alias("i")).where(F.col("i").isNotNull())
                .select("i.*"))

    return transform


def summary_increments(windows: Windows) -> Transform:
    """Every summary increment of a set of analyzed rows: one shuffle, INCREMENT_COLUMNS.

    ``n`` is the count (``yes`` responses for ``event``); ``no`` and ``guests`` are only set for
    ``event``; ``label`` carries the event's name.
    """

    def transform(df: DataFrame) -> DataFrame:
        return (df.transform(increment_rows(windows))
                .groupBy("kind", "window_start", "item")
                .agg(F.sum("n").alias("n"), F.sum("no").alias("no"), F.sum("guests").alias("guests"),
                     F.max("label").alias("label")))

    return transform
