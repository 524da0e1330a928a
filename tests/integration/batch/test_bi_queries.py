"""The batch tables' BI queries of docs/tables.md, run through `kappa sql` (DuckDB over delta-rs)
on a small lake, against answers written by hand."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from jobs.batch.run import date_range, run_jobs
from jobs.config.load import load_config
from jobs.loader.sql import run_sql
from tests.integration.batch.support import silver_row, write_silver, write_table

DOC = Path(__file__).resolve().parents[3] / "docs" / "tables.md"
D1, D5, DEC29 = date(2026, 1, 1), date(2026, 1, 5), date(2025, 12, 29)
JAN5 = D5   # a Monday: the first day of the second week
SALSA_JAZZ, GO = ("Salsa", "Jazz"), ("Go",)
EXPECTED = {
    "top_cities_per_day": [(D1, "Barcelona", 2, 1), (D1, "Valencia", 2, 2),
                           (D5, "Barcelona", 1, 1), (D5, "Madrid", 1, 2)],
    "topic_trends_per_week": [(DEC29, "Go", 3), (DEC29, "Jazz", 2), (DEC29, "Salsa", 2),
                              (JAN5, "Go", 1), (JAN5, "Jazz", 1), (JAN5, "Salsa", 1)],
    "events_by_expected_attendance": [("e2", "Event e2", 5, 2, 3), ("e1", "Event e1", 4, 2, 2),
                                      ("e3", "Event e3", 3, 2, 1)],
    "dead_letters_by_reason_per_day": [(D1, "invalid_json", 2), (D1, "missing_field", 1),
                                       (date(2026, 1, 2), "invalid_json", 1)],
}


def _queries() -> dict[str, str]:
    blocks = re.findall(r"```sql\n-- batch query: (\w+)\n(.*?)```", DOC.read_text(), flags=re.S)
    return {name: body.strip() for name, body in blocks}


def _dead_letter(day: int, reason: str, source: str) -> dict:
    return {"dlq_date": date(2026, 1, day), "reason_code": reason, "source": source,
            "source_topic": None, "source_partition": None, "source_offset": None,
            "kafka_timestamp": datetime(2026, 1, day, 12, tzinfo=UTC)}


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("bi") / "lake")
    write_silver(root, [
        silver_row(1, 1, 9, event_id="e1", guests=2, topics=SALSA_JAZZ),
        silver_row(2, 1, 10, event_id="e1", response="no", topics=SALSA_JAZZ),
        silver_row(3, 1, 11, city="Madrid", event_id="e2", topics=GO),
        silver_row(4, 1, 12, city="Valencia", event_id="e3", guests=1, topics=GO),
        silver_row(5, 1, 13, city="Valencia", event_id="e3", topics=GO),
        silver_row(6, 5, 9, city="Madrid", event_id="e2", guests=3, topics=GO),
        silver_row(7, 5, 10, event_id="e1", topics=SALSA_JAZZ),
    ])
    write_table(root, "ops.dlq", [_dead_letter(1, "invalid_json", "stream:rsvps.raw/0/1"),
                                  _dead_letter(1, "invalid_json", "stream:rsvps.raw/0/2"),
                                  _dead_letter(1, "missing_field", "http"),
                                  _dead_letter(2, "invalid_json", "stream:rsvps.raw/1/4")],
                partition_by=["dlq_date"])
    cfg = load_config("test", environ={"KAPPA_LAKE__ROOT": root})
    run_jobs(spark, cfg, ["city_daily", "topic_daily", "event_stats", "dlq_daily"],
             date_range(DEC29, date(2026, 1, 6)))
    return root, cfg


def test_every_documented_batch_query_gives_the_hand_written_answer(lake):
    _, cfg = lake
    queries = _queries()
    assert set(queries) == set(EXPECTED), "docs/tables.md and the expected answers disagree"
    for name, query in queries.items():
        _, rows = run_sql(cfg, query)
        assert [tuple(row) for row in rows] == EXPECTED[name], name


@pytest.mark.slow
def test_kappa_sql_sees_the_batch_tables(lake, run_kappa):
    root, _ = lake
    done = run_kappa("sql", _queries()["dead_letters_by_reason_per_day"], "--format", "json",
                     env={"KAPPA_LAKE__ROOT": root})
    assert done.returncode == 0, done.stderr
    rows = [(row["dlq_date"], row["reason_code"], row["dead_letters"]) for row in json.loads(done.stdout)]
    assert rows == [("2026-01-01", "invalid_json", 2), ("2026-01-01", "missing_field", 1),
                    ("2026-01-02", "invalid_json", 1)]
