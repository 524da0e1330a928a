"""A pipeline's table rows and load specs, on tiny inline records, against answers written by hand."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from jobs.config.load import load_config
from jobs.engine.lake.tables import load_targets, table_spec
from jobs.errors import ConfigError
from jobs.pipelines.define import Definitions
from jobs.pipelines.spec import PipelineSpec, Table

KAFKA = "topic string, partition int, offset long, timestamp timestamp, key binary, value binary"
NOV_1 = 1_793_491_200_000  # 2026-11-01T00:00:00Z
SPEC = PipelineSpec.model_validate({
    "name": "colours", "source": {"topic": "c.raw"},
    "outputs": {"analyzed": {"topic": "c.out"}, "dlq": {"topic": "c.dlq"}},
    "streaming": {"query_name": "c", "redis_prefix": "c"},
    "tables": {"bronze.c": {"topic": "c.raw"}, "silver.c": {"topic": "c.out", "dedup_key": ["id"]},
               "ops.c_dlq": {"topic": "c.dlq"}, "gold.c_daily": {"gold": "daily"}}})
CODE = Definitions(Path("colours.py"), analyzed_schema=pa.schema([("id", pa.int64()), ("colour", pa.string()),
                                                                  ("event_time_ms", pa.int64())]))


def _kafka(spark, values: list[tuple[int, str]]):
    at = datetime(2026, 11, 2, tzinfo=UTC)
    rows = [("c.out", 0, offset, at, b"k", value.encode()) for offset, value in values]
    return spark.createDataFrame(rows, KAFKA)


def _analyzed(id_: int, colour: str, ms: int, source_offset: int) -> str:
    return json.dumps({"id": id_, "colour": colour, "event_time_ms": ms, "source_topic": "c.raw",
                       "source_partition": 0, "source_offset": source_offset, "late": False})


def test_silver_keeps_one_row_per_key_latest_event_then_first_delivery(spark) -> None:
    spec = table_spec(load_config(), SPEC, CODE, "silver.c", SPEC.tables["silver.c"])
    records = [(10, _analyzed(1, "red", NOV_1, 5)), (11, _analyzed(1, "blue", NOV_1 + 1, 6)),
               (12, _analyzed(2, "green", NOV_1 - 1, 7)), (13, _analyzed(2, "green", NOV_1 - 1, 7))]
    rows = _kafka(spark, records).transform(spec.rows()).orderBy("id").collect()
    assert [(r.id, r.colour, r.kafka_offset, r.event_date) for r in rows] == [
        (1, "blue", 11, date(2026, 11, 1)), (2, "green", 12, date(2026, 10, 31))]
    assert (spec.mode, spec.keys, spec.partition_by) == ("merge", ("id",), ("event_date",))


def test_raw_rows_read_event_time_when_they_can(spark) -> None:
    spec = table_spec(load_config(), SPEC, CODE, "bronze.c", SPEC.tables["bronze.c"])
    rows = _kafka(spark, [(0, json.dumps({"event_time_ms": NOV_1})), (1, "not json")]).transform(spec.rows())
    assert [(r.event_time_ms, r.event_date) for r in rows.orderBy("kafka_offset").collect()] == [
        (NOV_1, date(2026, 11, 1)), (None, date(2026, 11, 2))]


def test_tables_that_cannot_be_loaded_are_named() -> None:
    cfg = load_config()
    with pytest.raises(ConfigError, match=r"silver\.x holds analyzed records but declares no dedup_key"):
        table_spec(cfg, SPEC, CODE, "silver.x", Table(topic="c.out"))
    with pytest.raises(ConfigError, match="reads topic 'other', which is none of"):
        table_spec(cfg, SPEC, CODE, "bronze.x", Table(topic="other"))
    with pytest.raises(ConfigError, match=r"loads no table\(s\) gold.c_daily"):
        load_targets(cfg, SPEC, CODE, ["gold.c_daily"])
    assert [t.spec.name for t in load_targets(cfg, SPEC, CODE)] == ["bronze.c", "silver.c", "ops.c_dlq"]
