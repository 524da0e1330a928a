"""The batch jobs: what each reads, the pure transform that computes it, where it is written.

A job recomputes whole date partitions of one table from the partitions of the same dates of
its dated sources (and the whole of its undated ones). Source columns are named constants: the
read is the contract, a source column the job does not name is never read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.common.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SILVER, BRONZE, DLQ = "silver.rsvps", "bronze.rsvps_raw", "ops.dlq"
SILVER_READ = ("event_date date, rsvp_id long, event_time timestamp, event_id string, "
               "event_name string, group_id long, member_id long, response string, guests long, "
               "topics array<string>, city string, country string, late boolean")
BRONZE_READ = ("event_date date, value string, kafka_topic string, kafka_partition int, "
               "kafka_offset long")
DLQ_READ = ("dlq_date date, reason_code string, source string, source_topic string, "
            "source_partition int, source_offset long, kafka_timestamp timestamp")
DLQ_POSITIONS = "source_topic string, source_partition int, source_offset long"


@dataclass(frozen=True)
class Source:
    """One table a job reads.

    Attributes:
        table: ``schema.table``.
        columns: the columns read (Spark DDL).
        date_column: the partition column filtered to the run's dates; None reads every
            partition (a small table joined whole, e.g. dead-letter positions).
    """

    table: str
    columns: str
    date_column: str | None


@dataclass(frozen=True)
class BatchJob:
    """A table recomputed by date partition.

    Attributes:
        name: the job's name on the command line.
        table: the table it writes (``schema.table``).
        family: the Airflow DAG that runs it (``batch_<family>``).
        date_column: the table's partition column (the dates a run replaces).
        sources: what it reads.
        build: the pure transform: source frames (by table) -> the table's rows.
        question: the BI question the table answers (``kappa batch list``, docs/tables.md).
    """

    name: str
    table: str
    family: str
    date_column: str
    sources: tuple[Source, ...]
    build: Callable[[Mapping[str, DataFrame]], DataFrame]
    question: str


def _city_daily(frames: Mapping[str, DataFrame]) -> DataFrame:
    from jobs.batch.transforms import city_daily

    return frames[SILVER].transform(city_daily)


def _topic_daily(frames: Mapping[str, DataFrame]) -> DataFrame:
    from jobs.batch.transforms import topic_daily

    return frames[SILVER].transform(topic_daily)


def _event_stats(frames: Mapping[str, DataFrame]) -> DataFrame:
    from jobs.batch.transforms import delivered_rows, event_stats

    return event_stats(frames[SILVER], delivered_rows(frames[BRONZE], frames[DLQ]))


def _dlq_daily(frames: Mapping[str, DataFrame]) -> DataFrame:
    from jobs.batch.transforms import dlq_daily

    return frames[DLQ].transform(dlq_daily)


_SILVER = Source(SILVER, SILVER_READ, "event_date")
JOBS: dict[str, BatchJob] = {job.name: job for job in (
    BatchJob("city_daily", "gold.city_daily", "gold", "event_date", (_SILVER,), _city_daily,
             "Which cities had the most RSVPs (yes, no, guests, members, events) on a day?"),
    BatchJob("topic_daily", "gold.topic_daily", "gold", "event_date", (_SILVER,), _topic_daily,
             "Which topics trend, day by day and week by week?"),
    BatchJob("event_stats", "gold.event_stats", "gold", "event_date",
             (_SILVER, Source(BRONZE, BRONZE_READ, "event_date"), Source(DLQ, DLQ_POSITIONS, None)),
             _event_stats, "Which events expect the most attendees, under either counting rule?"),
    BatchJob("dlq_daily", "ops.dlq_daily", "ops", "dlq_date", (Source(DLQ, DLQ_READ, "dlq_date"),),
             _dlq_daily, "How many dead letters per day, by reason and source?"),
)}
FAMILIES: dict[str, tuple[str, ...]] = {
    family: tuple(name for name, job in JOBS.items() if job.family == family)
    for family in dict.fromkeys(job.family for job in JOBS.values())
}


def job(name: str) -> BatchJob:
    """The job called ``name`` (ConfigError, exit 2, naming the known ones, when unknown)."""
    if name not in JOBS:
        raise ConfigError(f"unknown batch job {name!r}; known: {', '.join(JOBS)} (kappa batch list)")
    return JOBS[name]
