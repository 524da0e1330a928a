"""The executor write path's pure parts: path choice, the suite split over chunks, file layout.

Real Great Expectations and pyarrow; no Spark or Kafka (tests/integration/loader/
test_write_paths.py runs the whole path). Expected values are written by hand.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.config.load import load_config
from jobs.errors import ConfigError
from jobs.loader.chunks import chunk_report, combine, executor_unready, sort_keys
from jobs.loader.files import NULL_PARTITION, file_stats, write_files
from jobs.loader.offsets import PartitionRange, cap_ranges
from jobs.loader.quality import judge, measure, split_rows
from jobs.loader.scale import choose_write_path, chunks, driver_batch_records, worker_conf
from jobs.loader.suites import Rule, suite_rules
from jobs.loader.tables import LoadTarget, specs

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SPECS = specs(load_config("test"))
BRONZE = SPECS["bronze.rsvps_raw"]


def _cfg(**loader: object):
    environ = {f"KAPPA_LOADER__{key.upper()}": json.dumps(value) for key, value in loader.items()}
    return load_config("test", environ=environ)


@pytest.mark.parametrize(("table", "loader", "master", "records", "path"), [
    ("bronze.rsvps_raw", {}, "local[2]", 500_000, "driver"),
    ("bronze.rsvps_raw", {}, "local[2]", 500_001, "executors"),
    ("bronze.rsvps_raw", {"driver_path_max_rows": 10}, "local", 11, "executors"),
    ("bronze.rsvps_raw", {}, "yarn", 5, "executors"),
    ("bronze.rsvps_raw", {}, "local-cluster[2,1,1024]", 5, "executors"),
    ("bronze.rsvps_raw", {"write_path": "driver"}, "yarn", 9_000_000, "driver"),
    ("ops.dlq", {"write_path": "executors"}, "local[2]", 1, "executors"),
    ("silver.rsvps", {}, "yarn", 9_000_000, "executors"),
    ("silver.rsvps", {}, "local[2]", 500_000, "driver"),
    ("gold.rsvp_summaries", {"write_path": "executors"}, "local[2]", 1, "executors"),
])
def test_write_path_choice(table, loader, master, records, path):
    cfg = _cfg(**loader).model_copy(update={"spark": _cfg().spark.model_copy(update={"master": master})})
    chosen, why = choose_write_path(cfg, SPECS[table], suite_rules(cfg, table), records)
    assert chosen == path, why


@pytest.mark.parametrize(("loader", "records", "record_bytes", "path"), [
    ({}, 300_000, 975.0, "executors"),           # 292 MB: the batch that ran the driver out of memory
    ({}, 500_000, 260.0, "driver"),              # 130 MB
    ({"driver_path_max_bytes": 1_000}, 11, 100.0, "executors"),
    ({"driver_path_max_bytes": 1_000}, 10, 100.0, "driver"),
    ({"driver_path_max_bytes": 1_000}, 11, None, "driver"),  # size unknown: the row limit alone
])
def test_write_path_choice_by_bytes(loader, records, record_bytes, path):
    cfg = _cfg(**loader)
    chosen, why = choose_write_path(cfg, BRONZE, suite_rules(cfg, BRONZE.name), records, record_bytes)
    assert chosen == path, why


def test_driver_batches_are_cut_to_the_byte_budget():
    cfg = _cfg(driver_path_max_rows=1_000, driver_path_max_bytes=10_000)
    assert [driver_batch_records(cfg, size) for size in (None, 1.0, 100.0, 3_000.0, 50_000.0)] == [
        1_000, 1_000, 100, 3, 1]


@pytest.mark.parametrize(("write_path", "master", "daemon"), [
    ("executors", "local[2]", True), ("auto", "yarn", True), ("auto", "local[2]", False),
    ("driver", "yarn", False)])
def test_gx_is_preloaded_in_the_worker_daemon_where_executors_are_likely(write_path, master, daemon):
    cfg = _cfg(write_path=write_path)
    cfg = cfg.model_copy(update={"spark": cfg.spark.model_copy(update={"master": master})})
    expected = {"spark.python.daemon.module": "jobs.loader.daemon"} if daemon else {}
    assert worker_conf(cfg) == expected


def test_a_rule_that_needs_the_whole_batch_keeps_the_driver_path():
    cfg = _cfg(write_path="executors")
    unique = Rule("rsvp_id is unique", "ExpectColumnValuesToBeUnique", {"column": "rsvp_id"})
    assert executor_unready(suite_rules(cfg, "silver.rsvps")) == ["rsvp_id is unique"]
    assert executor_unready(suite_rules(cfg, "silver.rsvps"), ("rsvp_id",)) == []  # chunks cut by key
    assert sort_keys(suite_rules(cfg, "silver.rsvps"), ("rsvp_id",)) == ("rsvp_id",)
    assert sort_keys(suite_rules(cfg, "gold.rsvp_summaries"), ("key",)) == ()
    assert executor_unready(suite_rules(cfg, "bronze.rsvps_raw")) == []
    chosen, why = choose_write_path(cfg, BRONZE, [*suite_rules(cfg, "bronze.rsvps_raw"), unique], 10)
    assert (chosen, why) == ("driver", "rules ['rsvp_id is unique'] need the whole batch at once")


def test_bad_write_path_is_one_config_error():
    with pytest.raises(ConfigError, match=r"loader.write_path: Input should be 'auto', 'driver' or "
                                          r"'executors' \(found 'sideways'\)"):
        load_config("test", environ={"KAPPA_LOADER__WRITE_PATH": "sideways"})


def test_cap_spreads_over_partitions():
    ranges = [PartitionRange("t", 0, 10, 100), PartitionRange("t", 1, 0, 3), PartitionRange("t", 2, 5, 5)]
    assert [(r.start, r.end) for r in cap_ranges(ranges, 10)] == [(10, 14), (0, 3), (5, 5)]
    assert cap_ranges(ranges, 1_000) == ranges


def _bronze_rows() -> pa.Table:
    ids = [1, None, 3, 4, 5]
    mtimes = [BASE_MS, BASE_MS + 1000, None, 5, BASE_MS + 4000]
    return pa.table({
        "rsvp_id": pa.array(ids, pa.int64()), "mtime": pa.array(mtimes, pa.int64()),
        "event_time": pa.array([0] * 5, pa.timestamp("us", "UTC")), "value": ["{}"] * 5,
        "kafka_topic": ["t"] * 5, "kafka_partition": pa.array([0] * 5, pa.int32()),
        "kafka_offset": pa.array(range(5), pa.int64()),
        "kafka_timestamp": pa.array([0] * 5, pa.timestamp("us", "UTC")),
        "event_date": pa.array([None] * 5, pa.date32())})


def test_suite_over_two_chunks_is_judged_like_the_whole_batch():
    cfg = _cfg()
    rules = suite_rules(cfg, "bronze.rsvps_raw")
    target = LoadTarget(BRONZE, "t", "quarantine", "unused")
    rows = _bronze_rows()
    first, first_bad = chunk_report("bronze.rsvps_raw", rules, rows.slice(0, 3))
    second, second_bad = chunk_report("bronze.rsvps_raw", rules, rows.slice(3))
    assert first_bad == {1: ["rsvp_id is not null"], 2: ["mtime is not null"]}
    assert second_bad == {0: ["mtime between 946684800000 and " + rules[3].name.rsplit(" ", 1)[1]]}

    combined = combine("bronze.rsvps_raw", rules, first + second, rows.schema)
    counts = [(r.success, r.element_count, r.unexpected_count) for r in combined]
    assert counts == [(True, None, None), (False, 5, 1), (False, 5, 1), (False, 5, 1), (True, 5, 0),
                      (False, None, None)]
    assert sorted(combined[0].observed) == sorted(rows.column_names)
    assert combined[5].observed == BASE_MS + 4000  # the newest mtime; older than a day: stale
    failed, blocking, records = judge(target, rules, combined, "run1")
    assert failed == ["rsvp_id is not null (1 rows)", "mtime is not null (1 rows)",
                      f"{rules[3].name} (1 rows)"] and blocking is False
    assert [r["observed"] for r in records][5] == str(BASE_MS + 4000)

    whole, reasons = measure("bronze.rsvps_raw", rules, rows)  # the driver path, same verdicts
    assert whole == combined
    assert sorted(reasons) == [1, 2, 3]


def test_split_rows_names_the_failed_rules():
    rows = pa.table({"id": [1, 2, 3]})
    good, bad = split_rows(rows, {2: ["a", "b"], 0: ["a"]}, "run9")
    assert good.to_pylist() == [{"id": 2}]
    assert bad.to_pylist() == [{"id": 1, "failed_expectations": '["a"]', "quarantine_run_id": "run9"},
                               {"id": 3, "failed_expectations": '["a", "b"]', "quarantine_run_id": "run9"}]


def test_executor_files_use_deltas_partition_layout(tmp_path):
    import datetime as dt

    day = dt.date(2026, 1, 2)
    rows = pa.table({"id": [1, 2, 3], "event_date": pa.array([day, None, day], pa.date32())})
    files = sorted(write_files(str(tmp_path), rows, ["event_date"]), key=lambda f: f["path"])
    assert [(f["path"].split("/")[0], json.loads(f["partition_values"]), f["records"]) for f in files] == [
        ("event_date=2026-01-02", {"event_date": "2026-01-02"}, 2),
        (f"event_date={NULL_PARTITION}", {"event_date": None}, 1)]
    first = pq.read_table(tmp_path / files[0]["path"])
    assert first.column_names == ["id"] and first.column("id").to_pylist() == [1, 3]
    assert files[0]["size"] == (tmp_path / files[0]["path"]).stat().st_size
    assert write_files(str(tmp_path), rows.slice(0, 0), ["event_date"]) == []


def test_chunks_cut_only_where_the_sort_key_changes():
    batches = pa.table({"k": [1, 1, 2, 2, 2, 3, None, None], "v": list(range(8))}).to_batches(max_chunksize=1)
    assert [t["k"].to_pylist() for t in chunks(iter(batches), 2, ("k",))] == [
        [1, 1], [2, 2, 2], [3, None, None]]  # a null after a value is no cut: never splits a key
    assert [t.num_rows for t in chunks(iter(batches), 3)] == [3, 3, 2]
    whole = [t["k"].to_pylist() for t in chunks(iter(batches), 100, ("k",))]
    assert whole == [[1, 1, 2, 2, 2, 3, None, None]]


def test_uniqueness_over_key_cut_chunks_is_judged_like_the_whole_batch():
    cfg = _cfg()
    rules = [r for r in suite_rules(cfg, "silver.rsvps") if r.expectation == "ExpectColumnValuesToBeUnique"]
    rows = pa.table({"rsvp_id": pa.array([1, 2, 2, 3, 4, 4, 4], pa.int64())})
    first, first_bad = chunk_report("silver.rsvps", rules, rows.slice(0, 3), ("rsvp_id",))
    second, second_bad = chunk_report("silver.rsvps", rules, rows.slice(3), ("rsvp_id",))
    assert (first_bad, second_bad) == ({1: ["rsvp_id is unique"], 2: ["rsvp_id is unique"]},
                                       {1: ["rsvp_id is unique"], 2: ["rsvp_id is unique"],
                                        3: ["rsvp_id is unique"]})
    [combined] = combine("silver.rsvps", rules, first + second, rows.schema, ("rsvp_id",))
    assert (combined.success, combined.element_count, combined.unexpected_count) == (False, 7, 5)
    [whole], _ = measure("silver.rsvps", rules, rows)
    assert whole == combined


def test_executor_files_carry_min_max_and_null_count_stats():
    import datetime as dt

    stamp = dt.datetime(2026, 1, 1, 0, 0, 0, 1500, tzinfo=dt.UTC)
    data = pa.table({"id": pa.array([3, None, 1], pa.int64()), "city": ["Madrid", "Barcelona", None],
                     "at": pa.array([stamp, stamp, None], pa.timestamp("us", "UTC")),
                     "long": ["x" * 40, "y", "z"], "topics": [["a"], [], None]})
    assert json.loads(file_stats(data)) == {
        "numRecords": 3,
        "minValues": {"id": 1, "city": "Barcelona", "at": "2026-01-01T00:00:00.001Z"},
        "maxValues": {"id": 3, "city": "Madrid", "at": "2026-01-01T00:00:00.002Z"},  # rounded up
        "nullCount": {"id": 1, "city": 1, "at": 1, "long": 0, "topics": 1}}
