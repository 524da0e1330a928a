"""The Delta adapter on real delta-rs tables in a temporary folder (no Kafka, no Spark)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from jobs.config.load import load_config
from jobs.errors import ConfigError
from jobs.lake.delta import (
    Commit,
    DeltaConflictError,
    DeltaSchemaError,
    app_version,
    open_delta,
    table_uri,
    write_delta,
)
from jobs.lake.storage import storage_options
from jobs.loader.offsets import parse_until


def _rows(ids: list[int]) -> pa.Table:
    mtimes = [i * 10 for i in ids]
    return pa.table({"rsvp_id": pa.array(ids, pa.int64()), "mtime": pa.array(mtimes, pa.int64())})


def test_offsets_commit_with_rows_and_concurrent_same_range_conflicts(tmp_path):
    uri = table_uri(str(tmp_path), "bronze.rsvps_raw")
    write_delta(uri, _rows([1, 2]), snapshot=None, commit=Commit({"app/t/0": 2}))
    first, second = open_delta(uri), open_delta(uri)  # two loads planned from the same snapshot
    assert app_version(first, "app/t/0") == 2 and app_version(first, "app/t/1") is None

    write_delta(uri, _rows([3]), snapshot=first, commit=Commit({"app/t/0": 3}, {"kappa.run_id": "a"}))
    with pytest.raises(DeltaConflictError, match="another writer committed first"):
        write_delta(uri, _rows([3]), snapshot=second, commit=Commit({"app/t/0": 3}, {"kappa.run_id": "b"}))

    table = open_delta(uri)
    assert sorted(table.to_pyarrow_table().column("rsvp_id").to_pylist()) == [1, 2, 3]
    assert app_version(table, "app/t/0") == 3
    assert table.history(1)[0]["kappa.run_id"] == "a"


def test_merge_keeps_latest_and_additive_columns_merge(tmp_path):
    uri = table_uri(str(tmp_path), "silver.rsvps")
    write_delta(uri, _rows([1, 2]), snapshot=None)
    newer = pa.table({"rsvp_id": pa.array([2, 3], pa.int64()), "mtime": pa.array([99, 30], pa.int64()),
                      "city": ["Oslo", "Rome"]})
    write_delta(uri, newer, snapshot=open_delta(uri), mode="merge", merge_keys=["rsvp_id"],
                merge_condition="s.mtime > t.mtime")
    older = pa.table({"rsvp_id": pa.array([2], pa.int64()), "mtime": pa.array([5], pa.int64()),
                      "city": ["Old"]})
    write_delta(uri, older, snapshot=open_delta(uri), mode="merge", merge_keys=["rsvp_id"],
                merge_condition="s.mtime > t.mtime")
    rows = sorted(open_delta(uri).to_pyarrow_table().to_pylist(), key=lambda r: r["rsvp_id"])
    assert rows == [{"rsvp_id": 1, "mtime": 10, "city": None}, {"rsvp_id": 2, "mtime": 99, "city": "Oslo"},
                    {"rsvp_id": 3, "mtime": 30, "city": "Rome"}]


def test_non_additive_schema_change_fails_clearly(tmp_path):
    uri = table_uri(str(tmp_path), "bronze.rsvps_raw")
    write_delta(uri, _rows([1]), snapshot=None)
    retyped = pa.table({"rsvp_id": ["1"], "mtime": pa.array([1], pa.int64())})
    with pytest.raises(DeltaSchemaError, match="column 'rsvp_id' changes type int64 -> string"):
        write_delta(uri, retyped, snapshot=open_delta(uri))
    with pytest.raises(DeltaSchemaError, match=r"column 'mtime' .* is missing"):
        write_delta(uri, pa.table({"rsvp_id": pa.array([1], pa.int64())}), snapshot=open_delta(uri))
    assert open_delta(uri).version() == 0


def test_parse_until():
    assert parse_until(None).kind == "latest"
    assert parse_until('{"rsvps.raw": {"0": 5}}').offsets == {"rsvps.raw": {0: 5}}
    assert parse_until("2026-01-01T00:00:00Z").timestamp_ms == 1_767_225_600_000
    assert parse_until("1767225600000").timestamp_ms == 1_767_225_600_000
    with pytest.raises(ConfigError, match="no time zone"):
        parse_until("2026-01-01T00:00:00")


def test_two_writers_creating_the_table_cannot_both_commit(tmp_path):
    uri = table_uri(str(tmp_path), "bronze.rsvps_raw")
    assert open_delta(uri) is None and open_delta(uri) is None  # both planned: no table yet
    write_delta(uri, _rows([1, 2]), snapshot=None, commit=Commit({"app/t/0": 2}))
    with pytest.raises(DeltaConflictError, match="another writer committed first"):
        write_delta(uri, _rows([1, 2]), snapshot=None, commit=Commit({"app/t/0": 2}))
    assert open_delta(uri).to_pyarrow_table().num_rows == 2


def test_a_merge_commit_that_rewrites_a_compacted_file_conflicts(tmp_path):
    """delta-rs itself lets such a commit pass (deltalake 1.6.6): commit_files checks it."""
    import json
    import time

    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction, RemoveAction

    from jobs.lake.delta import commit_files

    uri = table_uri(str(tmp_path), "silver.rsvps")
    write_delta(uri, _rows([1, 2]), snapshot=None, commit=Commit({"app/t/0": 2}))
    write_delta(uri, _rows([3]), snapshot=open_delta(uri), commit=Commit({"app/t/0": 3}))
    planned = open_delta(uri)
    touched = next(path for path in planned.file_uris() if len(pq.read_table(path)) == 1)
    relative = touched.rsplit("/", 1)[1]
    open_delta(uri).optimize.compact()  # a concurrent `kappa maintain`: the file is replaced
    pq.write_table(_rows([3]), f"{uri}/new.parquet")  # the merge's rewrite of id 3
    now = int(time.time() * 1000)
    actions = [RemoveAction(relative, True, now, 1, {}),
               AddAction("new.parquet", 1, {}, now, True, json.dumps({"numRecords": 1}))]

    with pytest.raises(DeltaConflictError, match="replaced 1 of the files this merge rewrites"):
        commit_files(uri, actions, _rows([3]).schema, snapshot=planned, partition_by=(),
                     commit=Commit({"app/t/0": 4}), removed=[relative])
    assert sorted(open_delta(uri).to_pyarrow_table().column("rsvp_id").to_pylist()) == [1, 2, 3]

    planned = open_delta(uri)  # two merges of the same range: the second finds its offsets moved
    files = [path.rsplit("/", 1)[1] for path in planned.file_uris()]
    write_delta(uri, _rows([4]), snapshot=open_delta(uri), commit=Commit({"app/t/0": 4}))
    with pytest.raises(DeltaConflictError, match="moved 1 of its offsets"):
        commit_files(uri, actions[1:], _rows([3]).schema, snapshot=planned, partition_by=(),
                     commit=Commit({"app/t/0": 4}), removed=files[:1])


def test_an_s3_lake_gets_conditional_put_and_its_endpoint_a_local_lake_nothing(tmp_path):
    local = load_config("test", environ={"KAPPA_LAKE__ROOT": str(tmp_path)})
    assert storage_options(local.lake) == {}
    s3 = load_config("test", environ={"KAPPA_LAKE__ROOT": "s3://bucket/lake",
                                      "KAPPA_LAKE__S3__REGION": "eu-west-1",
                                      "KAPPA_LAKE__S3__ENDPOINT_URL": "http://127.0.0.1:9000",
                                      "KAPPA_LAKE__S3__ALLOW_HTTP": "true"})
    assert storage_options(s3.lake) == {"conditional_put": "etag", "aws_region": "eu-west-1",
                                        "aws_endpoint_url": "http://127.0.0.1:9000", "aws_allow_http": "true"}
    aws = load_config("test", environ={"KAPPA_LAKE__ROOT": "s3://bucket/lake"})
    assert storage_options(aws.lake) == {"conditional_put": "etag"}   # endpoint, region: the AWS chain
    with pytest.raises(ConfigError, match=r"lake\.s3: endpoint_url http://127\.0\.0\.1:9000 is plain HTTP"):
        load_config("test", environ={"KAPPA_LAKE__ROOT": "s3://bucket/lake",
                                     "KAPPA_LAKE__S3__ENDPOINT_URL": "http://127.0.0.1:9000"})
