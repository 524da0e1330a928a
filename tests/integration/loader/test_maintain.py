"""kappa maintain: compaction of closed partitions only, contents unchanged; vacuum floor."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from jobs.lake.delta import table_uri
from jobs.loader.maintain import run_maintenance
from jobs.loader.tables import targets

OLD_DAY = dt.date(2026, 1, 1)
LOGS = ("ops.load_audit", "ops.quality_results")


def _batch(first: int, day: dt.date) -> pa.Table:
    ids = list(range(first, first + 5))
    return pa.table({"rsvp_id": ids, "mtime": [i * 1000 for i in ids], "event_date": [day] * 5})


def test_compaction_of_closed_partitions_keeps_contents(lake):
    env = lake({"bronze.rsvps_raw": {}}, compact_min_files=3)
    uri = targets(env.cfg)[0].uri
    today = dt.datetime.now(dt.UTC).date()
    for index in range(6):
        write_deltalake(uri, _batch(index * 5, OLD_DAY), mode="append", partition_by=["event_date"])
    for index in range(4):
        write_deltalake(uri, _batch(100 + index * 5, today), mode="append", partition_by=["event_date"])
    before = sorted(DeltaTable(uri).to_pyarrow_table().to_pylist(), key=lambda r: r["rsvp_id"])

    report = run_maintenance(env.cfg, targets(env.cfg), None, dry_run=False)[0]

    assert report["files_before"] == 10
    assert report["files_per_partition_before"] == {"2026-01-01": 6, str(today): 4}
    assert report["files_per_partition_after"] == {"2026-01-01": 1, str(today): 4}
    assert report["compacted_partitions"] == ["2026-01-01"]
    assert report["files_after"] == 5
    after = sorted(DeltaTable(uri).to_pyarrow_table().to_pylist(), key=lambda r: r["rsvp_id"])
    assert after == before
    assert len(after) == 50


def test_vacuum_refuses_retention_below_floor(lake, run_kappa):
    env = lake({"bronze.rsvps_raw": {}})
    result = run_kappa("maintain", "--retention-h", "2", env=env.env)
    assert result.returncode == 2, result.stderr
    assert "error: vacuum retention 2h is below the floor of 24h" in result.stderr


def test_the_loader_logs_are_compacted(lake):
    env = lake({"bronze.rsvps_raw": {}}, compact_min_files=3)
    for name in LOGS:
        for run in range(5):
            write_deltalake(table_uri(env.cfg.lake.root, name), pa.table({"run_id": [f"r{run}"]}),
                            mode="append")

    maintained = run_maintenance(env.cfg, targets(env.cfg), None, dry_run=False)
    reports = {item["table"]: item for item in maintained}

    for name in LOGS:
        assert (reports[name]["files_before"], reports[name]["files_after"]) == (5, 1)
        rows = DeltaTable(table_uri(env.cfg.lake.root, name)).to_pyarrow_table().column("run_id").to_pylist()
        assert sorted(rows) == ["r0", "r1", "r2", "r3", "r4"]
