"""The RSVP pipeline's code: its record parser, per-record transform and gold transforms.

The functions are the ones the streaming job and the batch tier run (pipelines/rsvp/validate.py,
pipelines/rsvp/records.py, jobs/batch/transforms.py), registered here so the pipeline's
definition is whole and validated (``kappa pipelines validate rsvp``).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from jobs.batch import transforms
from jobs.common import rsvp_schema
from jobs.pipelines import Reject, definitions
from pipelines.rsvp.records import RECORDS, analyzed
from pipelines.rsvp.validate import Rules
from pipelines.rsvp.validate import parse as parse_rsvp

pipeline = definitions(__file__)
pipeline.records = RECORDS
pipeline.reasons = (rsvp_schema.OVERSIZE, "too_deep", "number_too_long", rsvp_schema.INVALID_JSON,
                    "not_an_object", rsvp_schema.WRONG_TYPE, rsvp_schema.MISSING_FIELD, "invalid_value",
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


pipeline.gold("city_daily")(transforms.city_daily)
pipeline.gold("topic_daily")(transforms.topic_daily)
pipeline.gold("event_stats")(transforms.event_stats)
pipeline.gold("dlq_daily")(transforms.dlq_daily)
