"""silver.rsvps (one row per rsvp_id, latest wins), gold.rsvp_summaries (latest per key), quality
policies (quarantine / fail) and the documented BI queries, on records produced by hand."""

from __future__ import annotations

import json

import pytest
from deltalake import DeltaTable

from jobs.lake.delta import open_delta, table_uri
from jobs.loader.load import run_load
from jobs.loader.offsets import parse_until
from jobs.loader.quality import report
from jobs.loader.tables import targets
from tests.integration.loader.bi_queries import EXPECTED, documented_queries
from tests.integration.loader.support import BASE_MS, DAY_MS, analyzed, produce, produce_raw, summary

SILVER, GOLD = "silver.rsvps", "gold.rsvp_summaries"


def _silver_records() -> list[tuple[bytes, bytes, int]]:
    rows = [
        analyzed(1, BASE_MS, offset=0),                                   # replaced below
        analyzed(2, BASE_MS + 1000, city="Madrid", response="no", guests=3, offset=1),  # not counted
        analyzed(3, BASE_MS + 2000, guests=2, offset=2, topics=("Salsa", "Jazz")),
        analyzed(1, BASE_MS + DAY_MS, response="no", offset=3),           # newer: wins, moves date
        analyzed(4, BASE_MS + 3000, response="maybe", offset=4),          # fails its suite
        analyzed(5, BASE_MS + DAY_MS + 5000, city="Madrid", guests=1, offset=5),
    ]
    return [(str(i).encode(), value, i % 2) for i, value in enumerate(rows)]


def _gold_records() -> list[tuple[bytes, bytes, int]]:
    rows = [
        ("city_window/1/Barcelona", summary("city_window", "city_window/1/Barcelona", 10, 1,
                                            window_start_ms=BASE_MS, window_end_ms=BASE_MS + 60_000,
                                            city="Barcelona", count=2)),
        ("city_window/1/Barcelona", summary("city_window", "city_window/1/Barcelona", 20, 2,
                                            window_start_ms=BASE_MS, window_end_ms=BASE_MS + 60_000,
                                            city="Barcelona", count=3)),
        ("event/ev1", summary("event", "event/ev1", 20, 2, event_id="ev1", yes=2, no=1, guests=2)),
        ("top_topics", summary("top_topics", "top_topics", 20, 2,
                               items=[{"item": "Salsa", "count": 4, "error": 0}])),
    ]
    return [(key.encode(), value, index % 3) for index, (key, value) in enumerate(rows)]


@pytest.mark.parametrize("loader", [{}, {"write_path": "executors", "executor_chunk_rows": 2}],
                         ids=["driver", "executors"])
def test_silver_gold_quarantine_and_bi_queries(lake, spark, kafka_props, loader):
    env = lake({"bronze.rsvps_raw": {}, GOLD: {"quality_policy": "fail"}, "ops.dlq": {},
                SILVER: {"quality_policy": "quarantine"}}, **loader)
    path = loader.get("write_path", "driver")
    produce_raw(kafka_props, env.topics["bronze.rsvps_raw"], 4)
    produce(kafka_props, env.topics["ops.dlq"], [(None, b"{", 0), (None, b"x", 0)],
            headers=[("kappa.reason", b"invalid_json: Expecting value")])
    produce(kafka_props, env.topics[SILVER], _silver_records())
    produce(kafka_props, env.topics[GOLD], _gold_records())

    results = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))
    assert [(r.table, r.outcome, r.rows, r.quarantined, r.write_path) for r in results] == [
        ("bronze.rsvps_raw", "committed", 4, 0, path), (GOLD, "committed", 3, 0, path),
        ("ops.dlq", "committed", 2, 0, path), (SILVER, "committed", 4, 1, path)]

    silver = DeltaTable(table_uri(env.cfg.lake.root, SILVER)).to_pyarrow_table().to_pylist()
    by_id = {row["rsvp_id"]: row for row in silver}
    assert sorted(by_id) == [1, 2, 3, 5] and len(silver) == 4
    assert (by_id[1]["response"], str(by_id[1]["event_date"])) == ("no", "2026-01-02")
    quarantined = open_delta(table_uri(env.cfg.lake.root, "quarantine.silver_rsvps"))
    bad = quarantined.to_pyarrow_table().to_pylist()
    assert [(r["rsvp_id"], json.loads(r["failed_expectations"])) for r in bad] == [
        (4, ["response is yes or no"])]

    produce(kafka_props, env.topics[SILVER], [(b"1", analyzed(1, BASE_MS - DAY_MS, city="Old", offset=9), 0)])
    late = run_load(spark, env.cfg, targets(env.cfg, [SILVER]), parse_until("latest"))[0]
    assert (late.outcome, late.rows) == ("committed", 1)
    silver = DeltaTable(table_uri(env.cfg.lake.root, SILVER)).to_pyarrow_table().to_pylist()
    assert sorted(r["rsvp_id"] for r in silver) == [1, 2, 3, 5]
    assert next(r for r in silver if r["rsvp_id"] == 1)["city"] == "Barcelona"

    from jobs.loader.sql import run_sql

    for name, query in documented_queries().items():
        assert run_sql(env.cfg, query)[1] == EXPECTED[name], name


def test_fail_policy_commits_nothing(lake, spark, kafka_props):
    env = lake({GOLD: {"quality_policy": "fail"}})
    produce(kafka_props, env.topics[GOLD], [
        (b"event/a", summary("event", "event/a", 5, 1, event_id="a", yes=1, no=0, guests=0), 0),
        (b"bad", summary("city_window", "city_window/1/X", 5, 1, city="X", count=-3), 1)])

    result = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))[0]

    assert result.outcome == "failed_quality"
    assert "count at least 0 (1 rows)" in result.error
    assert open_delta(table_uri(env.cfg.lake.root, GOLD)) is None
    failed = next(entry for entry in report(env.cfg) if entry["table"] == GOLD)["failed"]  # newest
    assert [(f["rule"], f["unexpected"], f["blocking"]) for f in failed] == [
        ("count at least 0", 1, False),
        ("freshness: newest emitted_ms at most 86400s old", None, False)]  # reported, not blocking
    again = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))[0]
    assert {str(r.partition): r.start for r in again.ranges} == {"0": 0, "1": 0, "2": 0}


def test_silver_quarantines_bad_guests_lat_lon_and_sql_filters_merged_strings(lake, spark, kafka_props):
    """Values just outside the documented silver rules go to quarantine (a loosened rule lets them
    in); after a merge (delta-rs writes its files' strings as string_view) string filters work."""
    env = lake({SILVER: {"quality_policy": "quarantine"}, GOLD: {}})
    produce(kafka_props, env.topics[SILVER], [(str(i).encode(), value, i % 2) for i, value in enumerate([
        analyzed(1, BASE_MS, offset=0), analyzed(2, BASE_MS + 1, response="no", offset=1),
        analyzed(3, BASE_MS + 2, guests=-1, offset=2), analyzed(4, BASE_MS + 3, lat=90.5, offset=3),
        analyzed(5, BASE_MS + 4, lat=-90.5, offset=4), analyzed(6, BASE_MS + 5, lon=180.5, offset=5),
        analyzed(7, BASE_MS + 6, lon=-180.5, offset=6)])])
    city = {"window_start_ms": BASE_MS, "window_end_ms": BASE_MS + 60_000}
    produce(kafka_props, env.topics[GOLD], [
        (b"a", summary("city_window", "city_window/1/Zürich", 10, 1, city="Zürich", count=1, **city), 0),
        (b"b", summary("city_window", "city_window/1/Bern", 10, 1, city="Bern", count=4, **city), 1)])
    first = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))
    assert [(r.table, r.outcome, r.rows, r.quarantined) for r in first] == [
        (SILVER, "committed", 2, 5), (GOLD, "committed", 2, 0)]
    bad = DeltaTable(table_uri(env.cfg.lake.root, "quarantine.silver_rsvps")).to_pyarrow_table().to_pylist()
    assert sorted((r["rsvp_id"], json.loads(r["failed_expectations"])) for r in bad) == [
        (3, ["guests at least 0"]), (4, ["lat between -90 and 90"]), (5, ["lat between -90 and 90"]),
        (6, ["lon between -180 and 180"]), (7, ["lon between -180 and 180"])]

    produce(kafka_props, env.topics[SILVER], [(b"2", analyzed(2, BASE_MS + 9, offset=7), 0),
                                              (b"8", analyzed(8, BASE_MS + 9, response="no", offset=8), 1)])
    produce(kafka_props, env.topics[GOLD], [
        (b"a", summary("city_window", "city_window/1/Zürich", 20, 2, city="Zürich", count=3, **city), 0)])
    merged = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))
    assert [(r.outcome, r.rows, r.write_path) for r in merged] == [
        ("committed", 2, "driver"), ("committed", 1, "driver")]

    from jobs.loader.sql import render, run_sql

    assert run_sql(env.cfg, "SELECT count(*) FROM silver.rsvps WHERE response = 'yes'")[1] == [(2,)]
    assert run_sql(env.cfg, "SELECT rsvp_id FROM silver_rsvps WHERE response <> 'yes'")[1] == [(8,)]
    assert run_sql(env.cfg, "SELECT \"count\" FROM gold.rsvp_summaries WHERE city = 'Zürich'")[1] == [(3,)]
    columns, rows = run_sql(env.cfg, "SELECT rsvp_id, topics, state FROM silver.rsvps WHERE rsvp_id = 8")
    assert render(columns, rows, "csv") == 'rsvp_id,topics,state\n8,"[""Salsa""]",'
