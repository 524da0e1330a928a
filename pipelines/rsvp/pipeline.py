"""The RSVP pipeline's code: its record parser, per-record transform, tables, gold transforms and reconcile.

The parser and transform are the ones its streaming job runs (pipelines/rsvp/validate.py,
pipelines/rsvp/records.py, reached by ``kappa stream`` through ``pipeline.records``), registered
here so the pipeline's definition is whole and validated (``kappa pipelines validate rsvp``). The
gold transforms (gold.py) and what reconcile compares (reconcile.py) are what the batch tier runs
for it (``kappa batch run | reconcile``); its REST endpoints (serve.py) are what ``kappa serve``
mounts beside its streams.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame

from jobs.pipelines import Reject, Source, definitions
from pipelines.rsvp import gold, quality, reconcile, schema, serve
from pipelines.rsvp.records import RECORDS, analyzed
from pipelines.rsvp.tables import TABLES
from pipelines.rsvp.validate import Rules
from pipelines.rsvp.validate import parse as parse_rsvp

pipeline = definitions(__file__)
pipeline.records = RECORDS
pipeline.reasons = (schema.OVERSIZE, "too_deep", "number_too_long", schema.INVALID_JSON,
                    "not_an_object", schema.WRONG_TYPE, schema.MISSING_FIELD, "invalid_value",
                    "bad_event_time")
pipeline.analyzed_schema = pa.schema([
    ("schema_version", pa.int32()), ("rsvp_id", pa.int64()), ("event_time_ms", pa.int64()),
    ("event_time", pa.string()), ("event_id", pa.string()), ("event_name", pa.string()),
    ("group_id", pa.int64()), ("group_name", pa.string()), ("member_id", pa.int64()),
    ("response", pa.string()), ("guests", pa.int64()), ("topics", pa.list_(pa.string())),
    ("city", pa.string()), ("country", pa.string()), ("state", pa.string()), ("lat", pa.float64()),
    ("lon", pa.float64()), ("venue_id", pa.int64()), ("source_topic", pa.string()),
    ("source_partition", pa.int32()), ("source_offset", pa.int64()), ("kafka_timestamp_ms", pa.int64()),
    ("ingest_lag_ms", pa.int64()), ("late", pa.bool_())])


@pipeline.parse
def parse(value: bytes, key: bytes | None, params: dict[str, Any]) -> Any:
    """The typed RSVP of a valid value; :class:`Reject` with the dead-letter reason otherwise."""
    record, reason = parse_rsvp(value, params.get("kafka_ms"), Rules())
    if reason is not None:
        code, _, detail = reason.partition(": ")
        raise Reject(code, detail)
    return record


@pipeline.analyze
def analyze(record: Any, previous: Any, params: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The analyzed record of a typed RSVP (no keyed state: ``previous`` is always None)."""
    position = params["position"]
    return analyzed(record, *position, late=params.get("late", False)), None


SILVER = Source(gold.SILVER, gold.SILVER_READ, "event_date")


@pipeline.gold("city_daily", reads=(SILVER,))
def city_daily(silver: DataFrame) -> DataFrame:
    """Which cities had the most RSVPs (yes, no, guests, members, events) on a day?"""
    return gold.city_daily(silver)


@pipeline.gold("topic_daily", reads=(SILVER,))
def topic_daily(silver: DataFrame) -> DataFrame:
    """Which topics trend, day by day and week by week?"""
    return gold.topic_daily(silver)


@pipeline.gold("event_stats", reads=(SILVER, Source(gold.BRONZE, gold.BRONZE_READ, "event_date"),
                                     Source(gold.DLQ, gold.DLQ_POSITIONS, None)))
def event_stats(silver: DataFrame, bronze: DataFrame, dlq: DataFrame) -> DataFrame:
    """Which events expect the most attendees, under either counting rule?"""
    return gold.event_stats(silver, gold.delivered_rows(bronze, dlq))


@pipeline.gold("dlq_daily", reads=(Source(gold.DLQ, gold.DLQ_READ, "dlq_date"),))
def dlq_daily(dlq: DataFrame) -> DataFrame:
    """How many dead letters per day, by reason and source?"""
    return gold.dlq_daily(dlq)


pipeline.reconciler(reconcile.views_check)
pipeline.tables(*TABLES)
pipeline.quality("bronze.rsvps_raw")(quality.bronze)
pipeline.quality("ops.dlq")(quality.dlq)
pipeline.quality("silver.rsvps")(quality.silver)
pipeline.quality("gold.rsvp_summaries")(quality.gold)
pipeline.routes(serve.router)
