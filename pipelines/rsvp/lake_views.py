"""The RSVP live views as the lake recomputes them, in the keys ``kappa batch reconcile`` compares.

One snapshot of ``silver.rsvps``, ``bronze.rsvps_raw`` and ``ops.dlq`` goes through the pure
transforms of pipelines/rsvp/views.py; the result is ``Views`` (kind -> key -> value) in the keys of
``rsvps.summaries`` (``city_window/<start>/<city>``, ``members_window/<start>``,
``event/<event_id>`` -> ``[yes, no, guests]``, ``topic/<name>``) and, for what only Redis holds,
``topic_minute/<start>/<topic>``, ``trending/<start>/<topic>``, ``totals/<name>`` and
``members_all``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jobs.batch.reconcile import Views

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.batch.report import ReconcileReport
    from jobs.config.load import KappaConfig

RSVP_COLUMNS = "rsvp_id long, event_id string, member_id long, topics array<string>, city string"
DELIVERED_COLUMNS = ("rsvp_id long, mtime long, value string, kafka_topic string, kafka_partition int, "
                     "kafka_offset long")


def lake_views(spark: SparkSession, cfg: KappaConfig, report: ReconcileReport,
               progress: Callable[[str], None]) -> Views:
    """The views recomputed from one snapshot of bronze, silver and ops.dlq.

    Every partition of each is read, also for a run over some dates: a delivery's ``late`` flag
    depends on every delivery before it in its Kafka partition, and its RSVP's silver row may lie
    on another date (a later version); dates only narrow the windows compared.
    """
    from jobs.batch.jobs import Source
    from jobs.batch.lake import read_source, snapshot_at
    from jobs.lake.delta import table_uri
    from jobs.lake.storage import storage_options
    from pipelines.rsvp import views
    from pipelines.rsvp.gold import BRONZE, DLQ, DLQ_POSITIONS, SILVER

    frames = {}
    for source in (Source(SILVER, RSVP_COLUMNS, None), Source(BRONZE, DELIVERED_COLUMNS, None),
                   Source(DLQ, DLQ_POSITIONS, None)):
        uri = table_uri(cfg.lake.root, source.table)
        snapshot = snapshot_at(uri, None, storage_options(cfg.lake))
        report.source_versions[source.table] = None if snapshot is None else snapshot.version()
        frames[source.table], count = read_source(spark, uri, snapshot, source, [],
                                                  storage=storage_options(cfg.lake))
        progress(f"reconcile: {source.table} at version {report.source_versions[source.table]}: {count} rows")
    streaming = cfg.streaming
    rows = views.deliveries(frames[BRONZE], frames[DLQ], frames[SILVER], streaming.watermark_s * 1000).cache()
    try:
        return _windowed(rows, cfg) | _all_time(rows, frames[DLQ], streaming.source_topic)
    finally:
        rows.unpersist()


def _windowed(rows: DataFrame, cfg: KappaConfig) -> Views:
    from pipelines.rsvp import views
    from pipelines.rsvp.aggregates import windows_from

    w = windows_from(cfg)
    slide_ms = w.trending_slide_ms
    minutes = views.topic_minutes(rows, slide_ms).cache()
    try:
        return {
            "city_window": {f"city_window/{r.window_start_ms}/{r.city}": r["count"] for r in
                            views.city_windows(rows, w.city_ms).collect()},
            "members_window": {f"members_window/{r.window_start_ms}": r.members for r in
                               views.member_windows(rows, w.members_ms).collect()},
            "topic_minute": {f"topic_minute/{r.window_start_ms}/{r.topic}": r["count"]
                             for r in minutes.collect()},
            "trending": {f"trending/{r.window_start_ms}/{r.topic}": r["count"] for r in
                         views.trending_windows(minutes, w.trending_ms, slide_ms).collect()},
        }
    finally:
        minutes.unpersist()


def _all_time(rows: DataFrame, dlq: DataFrame, source_topic: str) -> Views:
    from pyspark.sql import functions as F

    from pipelines.rsvp import views
    from pipelines.rsvp.gold import dead_positions

    counted = views.totals(rows).first()
    dead = dead_positions(dlq).where(F.col("kafka_topic") == F.lit(source_topic)).count()
    valid, late = (counted.valid, counted.late) if counted else (0, 0)
    return {
        "event": {f"event/{r.event_id}": [r.yes, r.no, r.guests]
                  for r in views.event_responses(rows).collect()},
        "topic": {f"topic/{r.topic}": r["count"] for r in views.topic_totals(rows).collect()},
        "totals": {"totals/input": valid + dead, "totals/valid": valid, "totals/dlq": dead,
                   "totals/late": late},
        "members_all": {"members_all": counted.members if counted else 0},
    }
