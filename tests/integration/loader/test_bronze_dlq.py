"""bronze.rsvps_raw and ops.dlq: offsets recorded with the rows, re-runs load nothing twice."""

from __future__ import annotations

import json

from deltalake import DeltaTable

from jobs.lake.delta import table_uri
from jobs.loader.load import run_load
from jobs.loader.offsets import parse_until
from jobs.loader.tables import targets
from tests.integration.loader.support import BASE_MS, produce, produce_raw


def test_bronze_and_dlq_load_once_and_resume(lake, spark, kafka_props):
    env = lake()
    produce_raw(kafka_props, env.topics["bronze.rsvps_raw"], 30)
    produce(kafka_props, env.topics["ops.dlq"], [(None, b"{not json", 0), (None, b"[1]", 0)],
            headers=[("kappa.reason", b"invalid_json: Expecting value"), ("kappa.source", b"file")])

    first = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))
    assert [(r.table, r.outcome, r.rows) for r in first] == [
        ("bronze.rsvps_raw", "committed", 30), ("ops.dlq", "committed", 2)]

    bronze = DeltaTable(table_uri(env.cfg.lake.root, "bronze.rsvps_raw"))
    rows = bronze.to_pyarrow_table().to_pylist()
    assert sorted(r["rsvp_id"] for r in rows) == list(range(1, 31))
    assert {r["kafka_partition"]: 0 for r in rows} == {0: 0, 1: 0, 2: 0}
    assert sorted((r["kafka_partition"], r["kafka_offset"]) for r in rows) == sorted(
        (p, o) for p in range(3) for o in range(10))
    assert {str(r["event_date"]) for r in rows} == {"2026-01-01"}
    topic = env.topics["bronze.rsvps_raw"]
    assert [bronze.transaction_version(f"kappa-loader/bronze.rsvps_raw/{topic}/{p}") for p in range(3)] == [
        10, 10, 10]
    dlq = DeltaTable(table_uri(env.cfg.lake.root, "ops.dlq")).to_pyarrow_table().to_pylist()
    assert [(r["reason_code"], r["source"], r["value"]) for r in dlq] == [
        ("invalid_json", "file", b"{not json"), ("invalid_json", "file", b"[1]")]

    again = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))
    assert [(r.outcome, r.rows) for r in again] == [("noop", 0), ("noop", 0)]

    produce_raw(kafka_props, topic, 6, first_id=31, base_ms=BASE_MS + 86_400_000)
    third = run_load(spark, env.cfg, targets(env.cfg, ["bronze.rsvps_raw"]), parse_until("latest"))
    assert (third[0].outcome, third[0].rows) == ("committed", 6)
    rows = DeltaTable(table_uri(env.cfg.lake.root, "bronze.rsvps_raw")).to_pyarrow_table().to_pylist()
    assert sorted(r["rsvp_id"] for r in rows) == list(range(1, 37))
    assert sorted({str(r["event_date"]) for r in rows}) == ["2026-01-01", "2026-01-02"]


def test_until_offsets_bounds_the_run(lake, spark, kafka_props):
    env = lake({"bronze.rsvps_raw": {}})
    topic = env.topics["bronze.rsvps_raw"]
    produce_raw(kafka_props, topic, 12)
    bound = parse_until(json.dumps({topic: {"0": 2, "1": 4, "2": 0}}))
    result = run_load(spark, env.cfg, targets(env.cfg), bound)[0]
    assert (result.outcome, result.rows) == ("committed", 6)
    rest = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))[0]
    assert rest.rows == 6
    covered = {str(r.partition): (r.start, r.end) for r in rest.ranges}
    assert covered == {"0": (2, 4), "1": (4, 4), "2": (0, 4)}
