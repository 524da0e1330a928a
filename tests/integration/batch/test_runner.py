"""The batch runner on a real Delta lake: partition replace, idempotence, pinned versions, CLI."""

from __future__ import annotations

import json
from datetime import date

import pytest
from deltalake import DeltaTable

from jobs.batch.run import run_job
from jobs.config.load import load_config
from jobs.lake.delta import table_uri
from tests.integration.batch.support import commit_info, silver_row, write_silver

CITY = "gold.city_daily"
DAYS = [date(2026, 1, 1), date(2026, 1, 2), date(2026, 1, 3)]


def _rows(root: str, table: str = CITY) -> list[tuple]:
    rows = DeltaTable(table_uri(root, table)).to_pyarrow_table().to_pylist()
    return sorted((str(r["event_date"]), r["city"], r["rsvps"], r["yes"], r["guests"], r["late_share"])
                  for r in rows)


@pytest.fixture()
def lake(tmp_path):
    root = str(tmp_path / "lake")
    write_silver(root, [
        silver_row(1, 1, 9, guests=2), silver_row(2, 1, 10, response="no", late=True),
        silver_row(3, 2, 9, city="Madrid"), silver_row(4, 4, 9),   # day 4: outside the runs
    ])
    return root, load_config("test", environ={"KAPPA_LAKE__ROOT": root})


def test_a_rerun_replaces_each_partition_once_and_gives_the_same_table(spark, lake):
    root, cfg = lake
    first = run_job(spark, cfg, "city_daily", DAYS)
    expected = [("2026-01-01", "Barcelona", 2, 1, 2, 0.5), ("2026-01-02", "Madrid", 1, 1, 0, 0.0)]
    assert _rows(root) == expected
    assert (first.rows_read, first.rows_written, first.partitions_replaced) == (3, 2, 3)
    second = run_job(spark, cfg, "city_daily", DAYS)
    assert _rows(root) == expected
    assert second.target_version == first.target_version + 1
    history = commit_info(root, CITY)
    assert [entry["operation"] for entry in history] == ["WRITE", "WRITE"]
    for entry in history:
        assert entry["operationParameters"]["mode"] == "Overwrite"
        assert "event_date >= '2026-01-01'" in entry["operationParameters"]["predicate"]
        assert entry["kappa.batch.source_versions"] == {"silver.rsvps": 0}
        assert entry["kappa.batch.dates"] == ["2026-01-01", "2026-01-02", "2026-01-03"]
        assert entry["operationMetrics"]["num_added_files"] == 2   # one per non-empty date
    assert history[0]["operationMetrics"]["num_removed_files"] == 2   # the first run's files


def test_late_data_recomputes_its_date_and_a_pinned_version_reads_the_old_snapshot(spark, lake):
    root, cfg = lake
    run_job(spark, cfg, "city_daily", DAYS)
    before = {item for item in DeltaTable(table_uri(root, CITY)).file_uris() if "2026-01-02" in item}
    write_silver(root, [silver_row(9, 1, 23, response="yes", late=True, guests=1)])   # silver v1
    report = run_job(spark, cfg, "city_daily", DAYS[:1])
    assert report.source_versions == {"silver.rsvps": 1} and report.partitions_replaced == 1
    assert _rows(root) == [("2026-01-01", "Barcelona", 3, 2, 3, 2 / 3),
                           ("2026-01-02", "Madrid", 1, 1, 0, 0.0)]
    assert {item for item in DeltaTable(table_uri(root, CITY)).file_uris() if "2026-01-02" in item} == before
    run_job(spark, cfg, "city_daily", DAYS[:1], versions={"silver.rsvps": 0})
    assert _rows(root)[0] == ("2026-01-01", "Barcelona", 2, 1, 2, 0.5)


def test_a_date_whose_rows_left_becomes_empty(spark, lake):
    root, cfg = lake
    run_job(spark, cfg, "city_daily", DAYS)
    write_silver(root, [silver_row(1, 1, 9, guests=2)], mode="overwrite")   # day 2 emptied
    run_job(spark, cfg, "city_daily", DAYS)
    assert _rows(root) == [("2026-01-01", "Barcelona", 1, 1, 2, 0.0)]


@pytest.mark.slow
def test_cli_runs_a_job_with_a_json_report_and_refuses_bad_arguments(run_kappa, lake):
    root, _ = lake
    env = {"KAPPA_LAKE__ROOT": root}
    for args, message in [
        (["nope", "--from", "2026-01-01", "--to", "2026-01-02"], "unknown batch job 'nope'"),
        (["city_daily", "--from", "2026-01-02", "--to", "2026-01-02"], "must be before --to"),
        (["city_daily", "--from", "01/02/2026", "--to", "2026-01-03"], "is not a date"),
        (["city_daily", "--from", "2026-01-01", "--to", "2026-01-02", "--versions", "x"], "is not JSON"),
    ]:
        done = run_kappa("batch", "run", *args, env=env)
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith("error: ") and message in done.stderr
    done = run_kappa("batch", "run", "city_daily,dlq_daily", "--from", "2026-01-01", "--to", "2026-01-03",
                     "--json", env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    reports = {item["job"]: item for item in json.loads(done.stdout)}
    assert reports["city_daily"]["rows_read"] == 3 and reports["city_daily"]["partitions_replaced"] == 2
    assert reports["city_daily"]["source_versions"] == {"silver.rsvps": 0}
    assert reports["dlq_daily"]["source_versions"] == {"ops.dlq": None}
    assert "city_daily: replaced 2 partition(s) of gold.city_daily" in done.stderr
    assert _rows(root) == [("2026-01-01", "Barcelona", 2, 1, 2, 0.5), ("2026-01-02", "Madrid", 1, 1, 0, 0.0)]


@pytest.mark.slow
def test_batch_submit_runs_the_job_through_spark_submit(run_kappa, lake):
    root, _ = lake
    env = {"KAPPA_LAKE__ROOT": root, "SPARK_LOCAL_IP": "127.0.0.1"}
    dry = run_kappa("batch", "submit", "--dry-run", "--master", "local[1]", "--", "city_daily",
                    "--from", "2026-01-01", "--to", "2026-01-03", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "jobs/batch/main.py city_daily --from 2026-01-01 --to 2026-01-03" in dry.stdout
    assert "--name kappa-batch" in dry.stdout
    done = run_kappa("batch", "submit", "--master", "local[1]", "--", "city_daily", "--from", "2026-01-01",
                     "--to", "2026-01-03", "--json", env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _rows(root) == [("2026-01-01", "Barcelona", 2, 1, 2, 0.5), ("2026-01-02", "Madrid", 1, 1, 0, 0.0)]
    bad = run_kappa("batch", "submit", "--master", "local[1]", "--", "nope", "--from", "2026-01-01",
                    "--to", "2026-01-03", env=env, timeout=600)
    # spark-submit's PythonRunner merges the driver's stderr into its stdout
    assert bad.returncode == 2 and "error: unknown batch job 'nope'" in bad.stdout + bad.stderr


def test_changed_partitions_name_both_dates_of_a_row_a_merge_moved(tmp_path):
    import pyarrow as pa

    from jobs.batch.lake import changed_partitions
    from jobs.lake.delta import open_delta, write_delta

    uri = str(tmp_path / "silver")
    schema = pa.schema([("rsvp_id", pa.int64()), ("event_date", pa.date32())])

    def rows(*pairs: tuple[int, int]) -> pa.Table:
        return pa.Table.from_pylist([{"rsvp_id": i, "event_date": date(2026, 1, d)} for i, d in pairs],
                                    schema)

    write_delta(uri, rows((1, 1), (2, 2), (3, 3)), snapshot=None, partition_by=["event_date"])
    assert changed_partitions(uri, 0, "event_date") == ["2026-01-01", "2026-01-02", "2026-01-03"]
    write_delta(uri, rows((1, 5)), snapshot=open_delta(uri), mode="merge", partition_by=["event_date"],
                merge_keys=["rsvp_id"])   # rsvp 1 moves from Jan 1 to Jan 5
    assert changed_partitions(uri, 1, "event_date") == ["2026-01-01", "2026-01-05"]
    write_delta(uri, rows((4, 2)), snapshot=open_delta(uri), partition_by=["event_date"])
    assert changed_partitions(uri, 2, "event_date") == ["2026-01-02"]


def test_nothing_to_write_makes_no_commit_but_a_date_whose_rows_left_is_emptied(spark, lake):
    root, cfg = lake
    nothing = run_job(spark, cfg, "dlq_daily", DAYS)   # no ops.dlq at all: no dead letters
    assert not DeltaTable.is_deltatable(table_uri(root, "ops.dlq_daily"))
    assert (nothing.rows_written, nothing.partitions_replaced, nothing.target_version) == (0, 0, None)
    run_job(spark, cfg, "city_daily", DAYS)   # version 0: Jan 1 and Jan 2
    quiet = run_job(spark, cfg, "city_daily", [date(2026, 1, 3)])   # no rows before, none now
    assert (quiet.partitions_replaced, quiet.target_version) == (0, 0)
    assert DeltaTable(table_uri(root, CITY)).version() == 0
    write_silver(root, [silver_row(1, 1, 9, guests=2)], mode="overwrite")   # Jan 2's RSVP went away
    emptied = run_job(spark, cfg, "city_daily", [date(2026, 1, 2)])
    assert (emptied.rows_written, emptied.partitions_replaced, emptied.target_version) == (0, 1, 1)
    assert _rows(root) == [("2026-01-01", "Barcelona", 2, 1, 2, 0.5)]
