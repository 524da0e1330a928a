"""Helpers of the batch tests: silver, bronze and dead-letter rows written straight to a lake."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa
from deltalake import write_deltalake

from jobs.lake.delta import table_uri

SILVER_SCHEMA = pa.schema([
    ("rsvp_id", pa.int64()), ("event_time", pa.timestamp("us", tz="UTC")), ("event_time_ms", pa.int64()),
    ("event_id", pa.string()), ("event_name", pa.string()), ("group_id", pa.int64()),
    ("member_id", pa.int64()), ("response", pa.string()), ("guests", pa.int64()),
    ("topics", pa.list_(pa.string())), ("city", pa.string()), ("country", pa.string()),
    ("late", pa.bool_()), ("event_date", pa.date32()),
])


def silver_row(rsvp_id: int, day: int, hour: int, *, city: str = "Barcelona", response: str = "yes",
               guests: int = 0, event_id: str = "e1", member_id: int | None = None,
               topics: tuple[str, ...] = ("Salsa",), late: bool = False) -> dict:
    """One silver.rsvps row (the columns the batch jobs read, plus event_time_ms); ``day`` 1 is
    2026-01-01, 32 is 2026-02-01."""
    moment = datetime(2026, 1, 1, hour, tzinfo=UTC) + timedelta(days=day - 1)
    return {"rsvp_id": rsvp_id, "event_time": moment, "event_time_ms": int(moment.timestamp() * 1000),
            "event_id": event_id, "event_name": f"Event {event_id}", "group_id": 7,
            "member_id": member_id if member_id is not None else 100 + rsvp_id, "response": response,
            "guests": guests, "topics": list(topics), "city": city, "country": "ES", "late": late,
            "event_date": moment.date()}


def write_silver(root: str, rows: list[dict], mode: str = "append") -> None:
    """Append (or overwrite) silver rows, partitioned by event_date as the loader does."""
    write_deltalake(table_uri(root, "silver.rsvps"), pa.Table.from_pylist(rows, SILVER_SCHEMA), mode=mode,
                    partition_by=["event_date"])


def commit_info(root: str, table: str) -> list[dict]:
    """The table's commits, newest first, with the batch metadata decoded."""
    from deltalake import DeltaTable

    history = DeltaTable(table_uri(root, table)).history()
    for entry in history:
        for key in ("kappa.batch.dates", "kappa.batch.source_versions"):
            if key in entry:
                entry[key] = json.loads(entry[key])
    return history


def write_table(root: str, table: str, rows: list[dict], schema: pa.Schema | None = None,
                partition_by: list[str] | None = None) -> None:
    """Append rows to any lake table through delta-rs."""
    write_deltalake(table_uri(root, table), pa.Table.from_pylist(rows, schema), mode="append",
                    partition_by=partition_by)
