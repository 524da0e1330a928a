"""The lake on S3, against moto's S3 API server on loopback (docs/deploy.md "The lake on S3").

The loader (executor path), the batch tier, the lake half of reconcile, `kappa sql` and
maintenance on ``s3://`` tables give the rows a local lake gives from the same topics. Of two
writers committing the same table version one wins and the server refuses the other's
conditional put of the log entry; two concurrent `kappa load` runs never commit a range twice.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest

from jobs.batch.report import ReconcileReport
from jobs.batch.run import run_job
from jobs.config.load import KappaConfig, load_config
from jobs.lake.delta import Commit, DeltaConflictError, open_delta, table_uri, write_delta
from jobs.lake.storage import storage_options
from jobs.loader.load import run_load
from jobs.loader.maintain import run_maintenance
from jobs.loader.offsets import parse_until
from jobs.loader.sql import run_sql
from jobs.loader.tables import targets
from pipelines.rsvp.lake_views import lake_views
from pipelines.rsvp.live import gold_views
from tests.conftest import AWS_REGION, AWS_TEST_ENV, REPO
from tests.integration.loader.support import BASE_MS, DAY_MS, analyzed, produce, produce_raw, summary

BRONZE, SILVER, GOLD, DLQ = "bronze.rsvps_raw", "silver.rsvps", "gold.rsvp_summaries", "ops.dlq"
POLICIES = {BRONZE: "fail", SILVER: "quarantine", GOLD: "fail", DLQ: "fail"}
COMPARED = (BRONZE, SILVER, GOLD, DLQ, "quarantine.silver_rsvps", "gold.city_daily")
DAYS = [date(2026, 1, 1), date(2026, 1, 2)]
PER_RUN = ("quarantine_run_id",)   # differs between the two runs by design
MAINTAINED = ("files_before", "files_after", "compacted_partitions", "vacuumed_files")


def _s3_client(endpoint: str):
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, region_name=AWS_REGION,
                        aws_access_key_id=AWS_TEST_ENV["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"])


@pytest.fixture()
def bucket(aws_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A bucket of this test; the AWS test environment set for this process."""
    for key, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(key, value)
    name = f"kappa-lake-{uuid.uuid4().hex[:8]}"
    where = {"LocationConstraint": AWS_REGION}
    _s3_client(aws_server).create_bucket(Bucket=name, CreateBucketConfiguration=where)
    return name


def _lake_env(kappa_env: dict[str, str], root: str, topics: dict[str, str], endpoint: str | None = None,
              **loader: object) -> dict[str, str]:
    tables = {name: {"topic": topic, "quality_policy": POLICIES[name]} for name, topic in topics.items()}
    env = {**kappa_env, "KAPPA_LAKE__ROOT": root, "KAPPA_LOADER__TABLES": json.dumps(tables)}
    env |= {f"KAPPA_LOADER__{key.upper()}": json.dumps(value) for key, value in loader.items()}
    if endpoint:
        env |= {"KAPPA_LAKE__S3__ENDPOINT_URL": endpoint, "KAPPA_LAKE__S3__ALLOW_HTTP": "true"}
    return env


def _produce(props: dict[str, str], topics: dict[str, str]) -> None:
    produce_raw(props, topics[BRONZE], 6)
    silver = [analyzed(1, BASE_MS, offset=0),
              analyzed(2, BASE_MS + 1000, city="Madrid", response="no", offset=1),
              analyzed(3, BASE_MS + 2000, guests=2, offset=2),
              analyzed(1, BASE_MS + DAY_MS, response="no", offset=3),   # newer: replaces id 1
              analyzed(4, BASE_MS + 3000, response="maybe", offset=4),   # fails its suite: quarantined
              analyzed(5, BASE_MS + DAY_MS + 5000, city="Madrid", guests=1, offset=5)]
    produce(props, topics[SILVER], [(str(i).encode(), value, i % 2) for i, value in enumerate(silver)])
    key = "city_window/1/Barcelona"
    window = {"window_start_ms": BASE_MS, "window_end_ms": BASE_MS + 60_000, "city": "Barcelona"}
    gold = [(key, summary("city_window", key, 10, 1, **window, count=2)),
            (key, summary("city_window", key, 20, 2, **window, count=3)),   # the same key, newer
            ("event/ev1", summary("event", "event/ev1", 20, 2, event_id="ev1", yes=2, no=1, guests=2))]
    produce(props, topics[GOLD], [(key.encode(), value, i % 3) for i, (key, value) in enumerate(gold)])
    produce(props, topics[DLQ], [(None, b"{", 0), (None, b"x", 0)],
            headers=[("kappa.reason", b"invalid_json: Expecting value")])


def _build(spark, cfg: KappaConfig) -> list[tuple]:
    """Load every table, run a gold job; the loads' (table, outcome, rows, quarantined, path)."""
    results = run_load(spark, cfg, targets(cfg), parse_until("latest"))
    run_job(spark, cfg, "city_daily", DAYS)
    return sorted((r.table, r.outcome, r.rows, r.quarantined, r.write_path) for r in results)


def _rows(cfg: KappaConfig, name: str) -> list[str]:
    table = open_delta(table_uri(cfg.lake.root, name), storage_options(cfg.lake))
    assert table is not None, f"{name} missing under {cfg.lake.root}"
    data = table.to_pyarrow_table()
    rows = data.drop_columns([column for column in PER_RUN if column in data.column_names]).to_pylist()
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in rows)


@pytest.mark.slow
def test_loader_batch_reconcile_sql_and_maintenance_on_s3_equal_a_local_lake(
        stack, kappa_env, spark, kafka_props, topic_factory, aws_server, bucket, monkeypatch, tmp_path,
        run_kappa):
    for key, value in AWS_TEST_ENV.items():   # the executors' Python workers read S3 too
        monkeypatch.setitem(spark.sparkContext.environment, key, value)
    topics = {name: topic_factory(1 if name == DLQ else 3) for name in POLICIES}
    _produce(kafka_props, topics)
    knobs = {"write_path": "executors", "executor_chunk_rows": 2, "compact_min_files": 2,
             "open_partition_days": 0, "vacuum_floor_h": 0, "slowest_reader_lag_h": 0}
    local_env = _lake_env(kappa_env, str(tmp_path / "lake"), topics, **knobs)
    s3_env = _lake_env(kappa_env, f"s3://{bucket}/lake", topics, aws_server, **knobs)
    local, s3 = (load_config("test", environ=env) for env in (local_env, s3_env))

    loads = [_build(spark, cfg) for cfg in (local, s3)]
    assert loads[1] == loads[0] == [
        (BRONZE, "committed", 6, 0, "executors"), (GOLD, "committed", 2, 0, "executors"),
        (DLQ, "committed", 2, 0, "executors"), (SILVER, "committed", 4, 1, "executors")]
    for name in COMPARED:
        assert _rows(s3, name) == _rows(local, name), name
    silver = [json.loads(row) for row in _rows(s3, SILVER)]
    assert sorted((r["rsvp_id"], r["response"], r["event_date"]) for r in silver) == [
        (1, "no", "2026-01-02"), (2, "no", "2026-01-01"), (3, "yes", "2026-01-01"), (5, "yes", "2026-01-02")]
    city = [json.loads(row) for row in _rows(s3, "gold.city_daily")]
    assert sorted((r["event_date"], r["city"], r["rsvps"], r["yes"]) for r in city) == [
        ("2026-01-01", "Barcelona", 1, 1), ("2026-01-01", "Madrid", 1, 0),
        ("2026-01-02", "Barcelona", 1, 0), ("2026-01-02", "Madrid", 1, 1)]

    report = ReconcileReport("s3-test", None)   # reconcile's lake side: deliveries of ids 1, 2, 3, 5
    views = lake_views(spark, s3, report, lambda line: None)
    assert views["city_window"] == {f"city_window/{BASE_MS}/Barcelona": 2, f"city_window/{BASE_MS}/Madrid": 2}
    assert report.source_versions == {SILVER: 0, BRONZE: 0, DLQ: 0}
    assert gold_views(s3, None) == gold_views(local, None) is not None

    query = "SELECT city, count(*) AS n, sum(guests) AS guests FROM silver.rsvps GROUP BY city ORDER BY city"
    shown = run_kappa("sql", query, "--format", "json", env={**s3_env, **AWS_TEST_ENV})
    assert shown.returncode == 0, shown.stderr
    columns, rows = run_sql(local, query)
    assert json.loads(shown.stdout) == [dict(zip(columns, row, strict=True)) for row in rows]
    assert [row[:2] for row in rows] == [("Barcelona", 2), ("Madrid", 2)]

    reports = [run_maintenance(cfg, targets(cfg), 0, dry_run=False) for cfg in (local, s3)]
    summaries = [{item["table"]: {key: item[key] for key in MAINTAINED} for item in found}
                 for found in reports]
    assert summaries[1] == summaries[0]
    assert summaries[1][BRONZE] == {"files_before": 3, "files_after": 1,
                                    "compacted_partitions": ["2026-01-01"], "vacuumed_files": 3}
    for name in COMPARED:
        assert _rows(s3, name) == _rows(local, name), name
    bronze = open_delta(table_uri(s3.lake.root, BRONZE), storage_options(s3.lake))
    listed = _s3_client(aws_server).list_objects_v2(Bucket=bucket, Prefix="lake/bronze/rsvps_raw/")
    listed = listed["Contents"]
    stored = {f"s3://{bucket}/{item['Key']}" for item in listed if "/_delta_log/" not in item["Key"]}
    assert bronze is not None and stored == set(bronze.file_uris())   # vacuum deleted the compacted files


class _RacingProxy(http.server.BaseHTTPRequestHandler):
    """Forwards to the S3 API server; holds each PUT of the raced log entry until both arrived."""

    upstream: tuple[str, int]
    raced: str
    barrier: threading.Barrier
    answers: list[int]

    def log_message(self, *args: object) -> None:
        pass

    def forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        racing = self.command == "PUT" and self.path.endswith(self.raced)
        if racing:
            assert self.headers.get("If-None-Match") == "*", "the commit was not a conditional put"
            self.barrier.wait()
        upstream = http.client.HTTPConnection(*self.upstream, timeout=30)
        upstream.request(self.command, self.path, body, dict(self.headers))
        answer = upstream.getresponse()
        data = answer.read()
        if racing:
            self.answers.append(answer.status)
        self.send_response(answer.status)
        for key, value in answer.getheaders():
            if key.lower() not in ("transfer-encoding", "connection"):
                self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = forward


@pytest.fixture()
def racing_proxy(aws_server: str) -> Iterator[Callable[[str], tuple[str, list[int]]]]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(raced: str) -> tuple[str, list[int]]:
        host, port = aws_server.removeprefix("http://").split(":")
        handler = type("Proxy", (_RacingProxy,), {"upstream": (host, int(port)), "raced": raced,
                                                  "barrier": threading.Barrier(2, timeout=30), "answers": []})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", handler.answers

    yield start
    for server in servers:
        server.shutdown()


def test_two_writers_of_one_version_on_s3_commit_once(bucket, racing_proxy):
    endpoint, answers = racing_proxy("/_delta_log/00000000000000000001.json")
    cfg = load_config("test", environ={"KAPPA_LAKE__ROOT": f"s3://{bucket}/lake",
                                       "KAPPA_LAKE__S3__ALLOW_HTTP": "true",
                                       "KAPPA_LAKE__S3__ENDPOINT_URL": endpoint})
    uri, storage = table_uri(cfg.lake.root, BRONZE), storage_options(cfg.lake)
    write_delta(uri, pa.table({"offset": [0]}), snapshot=None, commit=Commit({"t/0": 1}), storage=storage)
    snapshots = [open_delta(uri, storage) for _ in range(2)]
    outcomes: list[str] = []

    def write(index: int) -> None:
        try:
            write_delta(uri, pa.table({"offset": [1]}), snapshot=snapshots[index], commit=Commit({"t/0": 2}),
                        storage=storage)
            outcomes.append("committed")
        except DeltaConflictError as exc:
            outcomes.append(str(exc))

    writers = [threading.Thread(target=write, args=(index,)) for index in range(2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
    assert sorted(answers) == [200, 412]   # the S3 API refused the second put of the same log entry
    assert outcomes.count("committed") == 1 and "another writer committed first" in max(outcomes, key=len)
    table = open_delta(uri, storage)
    assert table is not None and table.version() == 1 and table.transaction_version("t/0") == 2
    assert sorted(table.to_pyarrow_table().column("offset").to_pylist()) == [0, 1]


def _commit_infos(endpoint: str, bucket: str, prefix: str) -> list[dict]:
    """Every commit's commitInfo, read from the log's objects.

    Not ``DeltaTable.history()``: deltalake 1.6.6 holds the GIL through that call, which
    deadlocks against the S3 API server running in this process.
    """
    client = _s3_client(endpoint)
    listed = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/_delta_log/")["Contents"]
    infos = []
    for item in sorted(listed, key=lambda entry: entry["Key"]):
        if item["Key"].endswith(".json"):
            body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().decode()
            infos += [json.loads(line)["commitInfo"] for line in body.splitlines() if '"commitInfo"' in line]
    return infos


@pytest.mark.slow
def test_two_concurrent_loads_into_one_s3_table_never_commit_a_range_twice(
        stack, kappa_env, kafka_props, topic_factory, aws_server, bucket, tmp_path: Path):
    topic = topic_factory(3)
    produce_raw(kafka_props, topic, 300)
    env = {**os.environ, **_lake_env(kappa_env, f"s3://{bucket}/lake", {BRONZE: topic}, aws_server,
                                     write_path="driver"), **AWS_TEST_ENV}
    logs = [tmp_path / f"load-{index}.log" for index in range(2)]
    handles = [log.open("w") for log in logs]
    runs = [subprocess.Popen([sys.executable, "-m", "jobs.cli", "load", "--json"], env=env, cwd=REPO,
                             stdout=handle, stderr=subprocess.STDOUT, text=True) for handle in handles]
    codes = [run.wait(timeout=240) for run in runs]
    outputs = [log.read_text() for log in logs]
    assert sorted(codes) in ([0, 0], [0, 4]), outputs
    if 4 in codes:
        assert "another writer committed first" in outputs[codes.index(4)]
    cfg = load_config("test", environ=env)
    table = open_delta(table_uri(cfg.lake.root, BRONZE), storage_options(cfg.lake))
    assert table is not None
    infos = _commit_infos(aws_server, bucket, "lake/bronze/rsvps_raw")
    ranges = [(int(partition), start, end) for info in infos
              for partition, (start, end) in json.loads(info.get("kappa.offsets", "{}")).items()]
    covered = Counter((partition, offset) for partition, start, end in ranges for offset in range(start, end))
    assert len(covered) == 300 and max(covered.values()) == 1
    rows = table.to_pyarrow_table(columns=["kafka_partition", "kafka_offset"]).to_pylist()
    assert len(rows) == 300 and len({(r["kafka_partition"], r["kafka_offset"]) for r in rows}) == 300
    audit = sorted(run_sql(cfg, "SELECT outcome, rows_written FROM ops.load_audit")[1], key=lambda r: -r[1])
    assert audit[0] == ("committed", 300) and audit[1] in (("conflict", 0), ("noop", 0))
