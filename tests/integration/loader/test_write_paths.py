"""The executor write path of `kappa load` against the driver path, on records produced by hand.

Both paths must leave the same table, quarantine, offsets and quality results for the same
Kafka input; the expected values below are written from that input, never from the loader.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from jobs.lake.delta import open_delta, table_uri
from jobs.loader.load import run_load
from jobs.loader.maintain import run_maintenance
from jobs.loader.offsets import parse_until
from jobs.loader.quality import report
from jobs.loader.tables import targets
from tests.integration.loader.support import BASE_MS, DAY_MS, produce, produce_raw, raw_record

BRONZE, DLQ, QUARANTINE = "bronze.rsvps_raw", "ops.dlq", "quarantine.bronze_rsvps_raw"


def _bronze_records() -> list[tuple[bytes, bytes, int]]:
    """Four records after produce_raw's nine (ids 1-9, offsets 0-2 of each partition)."""
    return [
        (b"10", json.dumps({"rsvp_id": 10, "response": "yes"}).encode(), 0),   # no mtime
        (b"11", raw_record(11, 5), 1),                                         # mtime in 1970
        (b"x", json.dumps({"mtime": BASE_MS + DAY_MS}).encode(), 2),           # no rsvp_id
        (b"12", raw_record(12, BASE_MS + DAY_MS), 2),                          # good, next day
    ]


def _app(topic: str, partition: int) -> str:
    return f"kappa-loader/{BRONZE}/{topic}/{partition}"


def _history_paths(uri: str) -> list[str]:
    return [entry.get("kappa.write_path") for entry in DeltaTable(uri).history() if "kappa.run_id" in entry]


@pytest.mark.parametrize(("loader", "paths"), [
    ({"write_path": "driver"}, ("driver", "driver", "driver")),
    ({"write_path": "executors"}, ("executors", "executors", "executors")),
    ({"write_path": "auto", "driver_path_max_rows": 12}, ("executors", "driver", "driver")),  # 13, 2, 2
], ids=["driver", "executors", "auto"])
def test_both_paths_load_the_same_rows_quarantine_and_offsets(lake, spark, kafka_props, loader, paths):
    env = lake({BRONZE: {"quality_policy": "quarantine"}, DLQ: {}}, executor_chunk_rows=2, **loader)
    topic = env.topics[BRONZE]
    produce_raw(kafka_props, topic, 9)
    produce(kafka_props, topic, _bronze_records())
    produce(kafka_props, env.topics[DLQ], [(None, b"{not json", 0), (None, b"[1]", 0)],
            headers=[("kappa.reason", b"invalid_json: Expecting value"), ("kappa.source", b"file")])

    results = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))

    assert [(r.table, r.outcome, r.rows, r.quarantined, r.write_path) for r in results] == [
        (BRONZE, "committed", 10, 3, paths[0]), (DLQ, "committed", 2, 0, paths[1])]
    root = env.cfg.lake.root
    bronze = DeltaTable(table_uri(root, BRONZE))
    rows = bronze.to_pyarrow_table().to_pylist()
    assert sorted(r["rsvp_id"] for r in rows) == [*range(1, 10), 12]
    assert sorted((r["kafka_partition"], r["kafka_offset"]) for r in rows) == [
        (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2), (2, 4)]
    assert {r["rsvp_id"]: str(r["event_date"]) for r in rows if r["rsvp_id"] in (1, 9, 12)} == {
        1: "2026-01-01", 9: "2026-01-01", 12: "2026-01-02"}
    assert next(r for r in rows if r["rsvp_id"] == 12)["value"] == raw_record(12, BASE_MS + DAY_MS).decode()
    quarantine = DeltaTable(table_uri(root, QUARANTINE))
    bad = sorted(quarantine.to_pyarrow_table().to_pylist(), key=lambda r: r["kafka_partition"])
    assert [(r["rsvp_id"], r["kafka_partition"], r["kafka_offset"]) for r in bad] == [
        (10, 0, 3), (11, 1, 3), (None, 2, 3)]
    reasons = [json.loads(r["failed_expectations"]) for r in bad]
    assert reasons[0] == ["mtime is not null"] and reasons[2] == ["rsvp_id is not null"]
    assert len(reasons[1]) == 1 and reasons[1][0].startswith("mtime between 946684800000 and ")
    assert {r["quarantine_run_id"] for r in bad} == {bronze.history(1)[0]["kappa.run_id"]}
    assert set(bad[0]) == {*rows[0], "failed_expectations", "quarantine_run_id"}
    for table in (bronze, quarantine):
        assert [table.transaction_version(_app(topic, p)) for p in range(3)] == [4, 4, 5]
    assert _history_paths(table_uri(root, BRONZE)) == [paths[0]]
    dlq = DeltaTable(table_uri(root, DLQ)).to_pyarrow_table().to_pylist()
    assert sorted((r["reason_code"], r["value"]) for r in dlq) == [("invalid_json", b"[1]"),
                                                                  ("invalid_json", b"{not json")]

    checks = next(entry for entry in report(env.cfg) if entry["table"] == BRONZE)
    assert (checks["passed"], checks["rows"]) == (2, 13)  # schema and kafka_offset not null pass
    failed = {f["rule"].split(" and ")[0]: (f["unexpected"], f["observed"]) for f in checks["failed"]}
    assert failed == {"rsvp_id is not null": (1, None), "mtime is not null": (1, None),
                      "mtime between 946684800000": (1, None),
                      "freshness: newest mtime at most 86400s old": (None, str(BASE_MS + DAY_MS))}

    again = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))
    assert [(r.outcome, r.rows) for r in again] == [("noop", 0), ("noop", 0)]

    produce(kafka_props, topic, [(b"13", raw_record(13, BASE_MS + 13_000), 0),
                                 (b"14", raw_record(14, BASE_MS + 14_000), 1)])
    more = run_load(spark, env.cfg, targets(env.cfg, [BRONZE]), parse_until("latest"))[0]
    assert (more.outcome, more.rows, more.write_path) == ("committed", 2, paths[2])
    assert _history_paths(table_uri(root, BRONZE)) == [paths[2], paths[0]]  # newest first
    rows = DeltaTable(table_uri(root, BRONZE)).to_pyarrow_table(columns=["rsvp_id"]).column(0).to_pylist()
    assert sorted(rows) == [*range(1, 10), 12, 13, 14]


def _orphans(uri: str) -> set[str]:
    on_disk = {str(path.relative_to(uri)) for path in Path(uri).rglob("*.parquet")}
    live = {str(Path(path.removeprefix("file://")).relative_to(uri)) for path in DeltaTable(uri).file_uris()}
    return on_disk - live


def test_fail_policy_on_executors_commits_nothing_and_maintain_clears_the_orphans(lake, spark, kafka_props):
    env = lake({BRONZE: {"quality_policy": "fail"}}, write_path="executors", executor_chunk_rows=2)
    topic, uri = env.topics[BRONZE], table_uri(env.cfg.lake.root, BRONZE)
    produce_raw(kafka_props, topic, 6)
    first = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))[0]
    assert (first.outcome, first.rows, first.write_path) == ("committed", 6, "executors")
    version = DeltaTable(uri).version()

    produce(kafka_props, topic, [(str(i).encode(), raw_record(i, 5 if i == 9 else BASE_MS + i * 1000), i % 3)
                                 for i in range(7, 13)])  # offsets 2-3 of each partition; id 9 is bad
    failed = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))[0]

    assert failed.outcome == "failed_quality"
    assert failed.failed_expectations[0].startswith("mtime between 946684800000 and ")
    assert failed.failed_expectations[0].endswith(" (1 rows)") and len(failed.failed_expectations) == 1
    assert "nothing committed" in failed.error and "`kappa maintain` removes them" in failed.error
    table = DeltaTable(uri)
    assert table.version() == version
    assert sorted(table.to_pyarrow_table(columns=["rsvp_id"]).column(0).to_pylist()) == list(range(1, 7))
    assert [table.transaction_version(_app(topic, p)) for p in range(3)] == [2, 2, 2]
    newest = next(entry for entry in report(env.cfg) if entry["table"] == BRONZE)
    between = [f["unexpected"] for f in newest["failed"] if f["rule"].startswith("mtime between 9466848")]
    assert between == [1]

    orphans = _orphans(uri)  # partitions 1 and 2 held no bad row: their chunks wrote a file each
    assert len(orphans) == 2
    week_ago = time.time() - 8 * 86_400
    for name in orphans:
        os.utime(Path(uri) / name, (week_ago, week_ago))
    maintained = run_maintenance(env.cfg, targets(env.cfg), None, dry_run=False)[0]
    assert maintained["vacuumed_files"] == 2 and _orphans(uri) == set()
    assert DeltaTable(uri).to_pyarrow_table().num_rows == 6
    assert open_delta(table_uri(env.cfg.lake.root, QUARANTINE)) is None


def test_bad_write_path_exits_2_with_one_line(run_kappa):
    result = run_kappa("load", env={"KAPPA_LOADER__WRITE_PATH": "sideways"})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "loader.write_path" in lines[0], lines


def test_byte_budget_picks_the_executors_and_a_broken_table_is_an_error_row(lake, spark, kafka_props):
    """Nine ~80-byte records exceed a 500-byte driver budget (the row limit alone would keep the
    driver path); ops.dlq's log is unreadable: its load is an `error` row, bronze still loads."""
    env = lake({DLQ: {}, BRONZE: {}}, driver_path_max_bytes=500)
    produce_raw(kafka_props, env.topics[BRONZE], 9)
    produce(kafka_props, env.topics[DLQ], [(None, b"{not json", 0)])
    log = Path(table_uri(env.cfg.lake.root, DLQ)) / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("{not json\n")

    results = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))

    assert [(r.table, r.outcome, r.rows, r.write_path) for r in results] == [
        (DLQ, "error", 0, "driver"), (BRONZE, "committed", 9, "executors")]
    assert results[0].error.startswith("DeltaError: ") and "\n" not in results[0].error
    from jobs.loader.sql import run_sql

    audit = run_sql(env.cfg, "SELECT table_name, outcome, error FROM ops.load_audit ORDER BY table_name")[1]
    assert [(table, outcome) for table, outcome, _ in audit] == [(BRONZE, "committed"), (DLQ, "error")]
    assert audit[1][2] == results[0].error
