"""Exactly once across kill -9 and concurrent `kappa load` runs (both write paths); 100k records
(slow)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from deltalake import DeltaTable

from jobs.lake.delta import table_uri
from jobs.loader.load import run_load
from jobs.loader.offsets import parse_until
from jobs.loader.tables import targets
from tests.conftest import REPO
from tests.integration.loader.support import BASE_MS, analyzed, produce, produce_raw

BRONZE = "bronze.rsvps_raw"


def _kappa(env: dict[str, str], *args: str, log=subprocess.PIPE) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jobs.cli", "load", *args],
                            env={**os.environ, **env}, cwd=REPO, stdout=log,
                            stderr=subprocess.STDOUT if log is not subprocess.PIPE else log, text=True)


def _kill_9_once_reading(env: dict[str, str], after_s: float) -> None:
    """Start `kappa load`, SIGKILL it ``after_s`` seconds after it says it is reading."""
    proc = _kappa(env)
    try:
        deadline = time.monotonic() + 240
        line = ""
        while "reading" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline() if proc.stderr else ""
            assert line or proc.poll() is None, "kappa load exited before it started reading"
        time.sleep(after_s)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(30)


def _coverage(cfg, count: int, partitions: int = 3) -> None:
    """Every offset of every partition exactly once; every rsvp_id exactly once."""
    rows = DeltaTable(table_uri(cfg.lake.root, BRONZE)).to_pyarrow_table(
        columns=["rsvp_id", "kafka_partition", "kafka_offset"]).to_pylist()
    positions = Counter((r["kafka_partition"], r["kafka_offset"]) for r in rows)
    per_partition = [count // partitions + (1 if p < count % partitions else 0) for p in range(partitions)]
    assert set(positions) == {(p, o) for p in range(partitions) for o in range(per_partition[p])}
    assert max(positions.values()) == 1
    assert sorted(r["rsvp_id"] for r in rows) == list(range(1, count + 1))


def _commit_ranges(cfg) -> list[tuple[int, int, int]]:
    """(partition, start, end) of every loader commit in the table's history."""
    ranges = []
    for entry in DeltaTable(table_uri(cfg.lake.root, BRONZE)).history():
        for partition, (start, end) in json.loads(entry.get("kappa.offsets", "{}")).items():
            if end > start:
                ranges.append((int(partition), start, end))
    return ranges


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("write_path", ["driver", "executors"])
def test_kill_9_during_load_then_rerun_is_exactly_once(lake, spark, kafka_props, write_path):
    env = lake({BRONZE: {}}, write_path=write_path)
    produce_raw(kafka_props, env.topics[BRONZE], 20_000)
    _kill_9_once_reading(env.env, after_s=1.0)
    results = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))
    assert results[0].outcome in ("committed", "noop")
    assert results[0].outcome == "noop" or results[0].write_path == write_path
    _coverage(env.cfg, 20_000)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("write_path", ["driver", "executors"])
def test_two_concurrent_loads_never_commit_the_same_range(lake, kafka_props, tmp_path, write_path):
    env = lake({BRONZE: {}}, write_path=write_path)
    produce_raw(kafka_props, env.topics[BRONZE], 3_000)
    logs = [tmp_path / f"load-{index}.log" for index in range(2)]
    handles = [log.open("w") for log in logs]
    runs = [_kappa(env.env, "--json", log=handle) for handle in handles]
    codes = [run.wait(timeout=800) for run in runs]
    outputs = [log.read_text() for log in logs]
    assert sorted(codes) in ([0, 0], [0, 4]), outputs
    if 4 in codes:
        assert "another writer committed first" in outputs[codes.index(4)]
    # the path each run took, named in its progress line (executors: with GX preloaded in the
    # executors' worker daemon, jobs/loader/daemon.py, which loader.write_path=executors selects)
    assert f"{write_path} path: loader.write_path={write_path}" in outputs[codes.index(0)]
    ranges = _commit_ranges(env.cfg)
    covered = Counter((p, o) for p, start, end in ranges for o in range(start, end))
    assert max(covered.values()) == 1 and len(covered) == 3_000
    from jobs.loader.sql import run_sql

    audit = run_sql(env.cfg, "SELECT outcome, rows_written FROM ops.load_audit ORDER BY rows_written DESC")[1]
    assert audit[0] == ("committed", 3_000)
    assert audit[1] in (("conflict", 0), ("noop", 0))
    _coverage(env.cfg, 3_000)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_100k_records_counts_match_offsets_and_silver_is_unique(lake, spark, kafka_props):
    """On the executor path; silver in two loads, the second merging 10,000 newer versions."""
    env = lake({BRONZE: {}, "silver.rsvps": {"quality_policy": "fail"}}, write_path="executors")
    produce_raw(kafka_props, env.topics[BRONZE], 100_000)
    silver_topic = env.topics["silver.rsvps"]
    produce(kafka_props, silver_topic, [
        (str(i).encode(), analyzed(i % 90_000 + 1, BASE_MS + i, offset=i), i % 3) for i in range(100_000)])
    half = json.dumps({silver_topic: {"0": 16_667, "1": 16_667, "2": 16_666}})  # records 0-49,999
    first = run_load(spark, env.cfg, targets(env.cfg, ["silver.rsvps"]), parse_until(half))
    assert [(r.outcome, r.rows, r.write_path) for r in first] == [("committed", 50_000, "executors")]
    results = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))
    assert [(r.outcome, r.rows) for r in results] == [("committed", 100_000), ("committed", 50_000)]
    bronze = DeltaTable(table_uri(env.cfg.lake.root, BRONZE))
    per_partition = Counter(bronze.to_pyarrow_table(columns=["kafka_partition"]).column(0).to_pylist())
    assert per_partition == {p: r.end - r.start for r in results[0].ranges for p in [r.partition]}
    assert per_partition == {0: 33_334, 1: 33_333, 2: 33_333}
    _coverage(env.cfg, 100_000)
    silver = DeltaTable(table_uri(env.cfg.lake.root, "silver.rsvps")).to_pyarrow_table(
        columns=["rsvp_id", "event_time_ms"]).to_pylist()
    assert len(silver) == 90_000 and len({r["rsvp_id"] for r in silver}) == 90_000
    latest = {r["rsvp_id"]: r["event_time_ms"] for r in silver}
    assert latest[1] == BASE_MS + 90_000 and latest[90_000] == BASE_MS + 89_999


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_kill_9_during_an_executor_merge_then_rerun_is_exactly_once(lake, spark, kafka_props):
    """silver.rsvps on the executor path: 3,000 ids loaded, then a merge of 3,000 more records
    (1,500 newer versions of stored ids) killed with SIGKILL mid-run, then re-run."""
    silver = "silver.rsvps"
    env = lake({silver: {}}, write_path="executors")
    topic = env.topics[silver]
    produce(kafka_props, topic, [(str(i).encode(), analyzed(i % 4_500 + 1, BASE_MS + i, offset=i), i % 3)
                                 for i in range(6_000)])
    half = json.dumps({topic: {"0": 1_000, "1": 1_000, "2": 1_000}})  # records 0-2,999
    first = run_load(spark, env.cfg, targets(env.cfg), parse_until(half))[0]
    assert (first.outcome, first.rows) == ("committed", 3_000)
    _kill_9_once_reading(env.env, after_s=3.0)  # into the check / match / rewrite jobs
    table = DeltaTable(table_uri(env.cfg.lake.root, silver))
    assert table.version() == 0  # the kill came before the merge's commit (the GX import alone takes longer)
    again = run_load(spark, env.cfg, targets(env.cfg), parse_until("latest"))[0]
    assert (again.outcome, again.rows, again.write_path) == ("committed", 3_000, "executors")
    table = DeltaTable(table_uri(env.cfg.lake.root, silver))
    rows = table.to_pyarrow_table(columns=["rsvp_id", "event_time_ms"]).to_pylist()
    latest = {r["rsvp_id"]: r["event_time_ms"] for r in rows}
    assert len(rows) == 4_500 == len(latest)
    # ids 1-1,500 were sent twice (records i and i + 4,500): the later one wins
    assert latest == {i % 4_500 + 1: BASE_MS + i for i in range(6_000) if i >= 1_500}
    assert [table.transaction_version(f"kappa-loader/{silver}/{topic}/{p}") for p in range(3)] == [2_000] * 3
