"""Every heavy DAG run end to end with ``dag.test()`` against the session's embedded stack.

Airflow: this process's private ``AIRFLOW_HOME`` (tests/dags/conftest.py) with ``airflow db
migrate`` and no scheduler (a running scheduler races ``dag.test()``). The platform: the task
layer calls ``load_config()``, so each test points it at its own topics, Redis prefix, query,
lake and checkpoints through ``KAPPA_*`` in ``os.environ`` (restored afterwards); the streaming
job that ``streaming_lifecycle`` starts inherits the same variables.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.dags.conftest import DAGS, patched_environ

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[2]
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def airflow_db() -> float:
    """``airflow db migrate`` of this process's private AIRFLOW_HOME; returns the seconds it took."""
    started = time.monotonic()
    migrate = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=dict(os.environ),
                             capture_output=True, text=True, timeout=600, check=False)
    assert migrate.returncode == 0, migrate.stdout[-2000:] + migrate.stderr[-4000:]
    took = time.monotonic() - started
    print(f"airflow db migrate ({os.environ['AIRFLOW_HOME']}) took {took:.1f}s")
    return took


@pytest.fixture()
def platform(stack, kappa_env, topic_factory, tmp_path) -> Iterator[Any]:
    """os.environ pointing the task layer at this test's topics, prefix, query, lake; restored after."""
    name = uuid.uuid4().hex[:8]
    topics = {"source_topic": topic_factory(3, "raw"), "analyzed_topic": topic_factory(3, "analyzed"),
              "summaries_topic": topic_factory(3, "summaries"), "dlq_topic": topic_factory(1, "dlq"),
              "metrics_topic": topic_factory(1, "metrics"), "errors_topic": topic_factory(1, "errors")}
    env = {**kappa_env,
           **{f"KAPPA_STREAMING__{key.upper()}": value for key, value in topics.items()},
           "KAPPA_STREAMING__QUERY_NAME": f"q-{name}",
           "KAPPA_STREAMING__REDIS_PREFIX": f"d{name}",
           "KAPPA_STREAMING__TRIGGER_S": "0.5",
           "KAPPA_STACK__DATA_DIR": str(tmp_path / "stack"),
           "KAPPA_LAKE__ROOT": str(tmp_path / "lake"),
           "KAPPA_LAKE__CHECKPOINT_ROOT": str(tmp_path / "checkpoints"),
           # as under `kappa airflow up`: tasks carry the instance's marker, which `airflow down` sweeps
           "KAPPA_AIRFLOW__HOME": str(tmp_path / "airflow"),
           "KAPPA_AIRFLOW_INSTANCE": str(tmp_path / "airflow"),
           "KAPPA_LOADER__TABLES": json.dumps({"bronze.rsvps_raw": {
               "topic": topics["source_topic"], "quality_policy": "quarantine"}})}
    with patched_environ(env):
        from jobs.config.load import load_config

        yield load_config()


def _run(dag_id: str, conf: dict[str, Any] | None = None, logical_date: datetime | None = None):
    """``dag.test()`` of dags/<dag_id>.py; returns (run state, {task_id: state}, seconds)."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS / f"{dag_id}.py")).get_dag(dag_id)
    assert dag is not None, dag_id
    started = time.monotonic()
    run = dag.test(logical_date=logical_date, run_conf=conf)
    took = round(time.monotonic() - started, 1)
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    print(f"dag.test({dag_id}, {conf}) -> {run.state} {states} in {took}s")
    return str(run.state), states, took


def _produce(cfg, start_ms: int, count: int, step_ms: int, seed: int = 16) -> None:
    """``count`` generated RSVPs whose Kafka timestamps are start_ms, start_ms + step_ms, ..."""
    from confluent_kafka import Producer

    from pipelines.rsvp.generator import RsvpGenerator

    producer = Producer(cfg.kafka.client_config() | {"linger.ms": 5})
    for index, item in enumerate(RsvpGenerator(seed=seed, start_ms=start_ms).generate(count)):
        producer.produce(cfg.streaming.source_topic, item.line, key=str(index).encode(),
                         partition=index % 3, timestamp=start_ms + index * step_ms)
    assert producer.flush(30) == 0


def _read_all(cfg, topic: str) -> list[Any]:
    """Every record of ``topic`` (from each partition's low to high watermark)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**cfg.kafka.client_config(), "group.id": f"dag-tests-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    found = []
    try:
        for partition in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, low)])
            position = low
            while position < high:
                message = consumer.poll(15)
                assert message is not None and not message.error(), message and message.error()
                position = message.offset() + 1
                found.append(message)
    finally:
        consumer.close()
    return found


def asset_events() -> dict[str, list[dict]]:
    """Every Asset event in this process's metadata DB: {asset uri: [extra, ...]}, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    found: dict[str, list[dict]] = {}
    with create_session() as session:
        rows = (session.query(AssetModel.uri, AssetEvent.extra)
                .join(AssetModel, AssetEvent.asset_id == AssetModel.id).order_by(AssetEvent.id))
        for uri, extra in rows:
            found.setdefault(uri, []).append(extra)
    return found


def _analyzed_positions(cfg) -> list[tuple[int, int]]:
    records = [json.loads(m.value()) for m in _read_all(cfg, cfg.streaming.analyzed_topic)]
    return [(r["source_partition"], r["source_offset"]) for r in records]


def _redis_snapshot(redis_client, prefix: str) -> dict[str, Any]:
    """Every key under ``prefix`` with its value (metrics excluded: they describe the last run)."""
    snapshot: dict[str, Any] = {}
    for raw in redis_client.scan_iter(match=f"{prefix}:*", count=1000):
        key = raw.decode()
        if ":metrics:" in key:
            continue
        kind = redis_client.type(raw).decode()
        if kind == "hash":
            snapshot[key] = redis_client.hgetall(raw)
        elif kind == "zset":
            snapshot[key] = redis_client.zrange(raw, 0, -1, withscores=True)
        elif kind == "list":
            snapshot[key] = redis_client.lrange(raw, 0, -1)
        else:  # strings, HyperLogLogs
            snapshot[key] = redis_client.get(raw)
    return snapshot


def _totals(redis_client, cfg) -> dict[str, int]:
    raw = redis_client.hgetall(f"{cfg.streaming.redis_prefix}:totals")
    return {k.decode(): int(v) for k, v in raw.items()}


def _delta_rows(cfg) -> int:
    from deltalake import DeltaTable

    from jobs.lake.delta import table_uri

    return DeltaTable(table_uri(cfg.lake.root, "bronze.rsvps_raw")).to_pyarrow_table().num_rows


def _wait(what: str, check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(1)
    raise AssertionError(f"{what} not reached within {timeout_s:.0f}s")


def _past_hour(hours_ago: int) -> datetime:
    return datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=hours_ago)


def _run_replay(hour: datetime, conf: dict[str, Any]):
    """``replay`` over [hour, hour + 1h). A manual run's data interval is the hour that *ends* at its
    logical date (CronDataIntervalTimetable.infer_manual_data_interval), unlike a backfill's run,
    whose logical date is its interval's start."""
    return _run("replay", conf, hour + timedelta(hours=1))


def test_replay_of_one_interval_twice_leaves_every_sink_identical(airflow_db, platform, redis_client):
    cfg = platform
    hour = _past_hour(3)
    start_ms = int(hour.timestamp() * 1000)
    _produce(cfg, start_ms - 60_000, 30, 1000, seed=1)      # the hour before: not in the interval
    _produce(cfg, start_ms, 240, 10_000, seed=2)             # 240 records inside [hour, hour + 1h)
    _produce(cfg, start_ms + HOUR_MS, 30, 1000, seed=3)      # the hour after: not in the interval
    conf = {"sinks": ["redis", "kafka", "delta"], "dry_run": False}
    bronze_uri = "delta://kappa/bronze/rsvps_raw"

    # the hour before first: a replay into Redis never starts beyond its fence (no silent gap)
    events_before = len(asset_events().get(bronze_uri, []))
    state, tasks, _ = _run_replay(hour - timedelta(hours=1), conf)
    assert state == "success", tasks
    before = _totals(redis_client, cfg)["input"]
    assert before == 30
    state, tasks, first_s = _run_replay(hour, conf)
    assert state == "success", tasks
    # each delta load published bronze with the dates it changed (the batch DAGs recompute them)
    published = asset_events()
    assert [extra["versions"] for extra in published.get(bronze_uri, [])[events_before:]] == [[0], [1]]
    assert all(extra["dates"] for extra in published[bronze_uri][events_before:])
    redis_after_first = _redis_snapshot(redis_client, cfg.streaming.redis_prefix)
    positions_first = sorted(set(_analyzed_positions(cfg)))
    delta_first = _delta_rows(cfg)
    totals = _totals(redis_client, cfg)
    assert totals["input"] - before == 240, totals          # exactly the interval, nothing after it
    assert len(positions_first) == totals["valid"] > 0
    # delta: the loader up to the interval's end (rows before the range are loaded too: no gap)
    assert delta_first == 30 + 240

    state, tasks, second_s = _run_replay(hour, conf)
    assert state == "success", tasks
    assert _redis_snapshot(redis_client, cfg.streaming.redis_prefix) == redis_after_first
    assert sorted(set(_analyzed_positions(cfg))) == positions_first  # deduplicated by source position
    assert _delta_rows(cfg) == delta_first
    assert asset_events() == published  # the repeat changed no table: no event
    print(f"replay twice: first {first_s}s, second {second_s}s; redis keys {len(redis_after_first)}, "
          f"analyzed {len(positions_first)}, delta rows {delta_first}")


def test_replay_of_a_range_no_longer_retained_fails_in_preflight(airflow_db, platform, redis_client):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    cfg = platform
    hour = _past_hour(5)
    start_ms = int(hour.timestamp() * 1000)
    _produce(cfg, start_ms + 60_000, 30, 1000, seed=4)       # inside the interval: offsets 0..9 each
    _produce(cfg, start_ms + HOUR_MS + 60_000, 30, 1000, seed=5)  # the next hour: offsets 10..19
    source = cfg.streaming.source_topic
    admin = AdminClient(cfg.kafka.client_config())
    deleted = admin.delete_records([TopicPartition(source, p, 10) for p in range(3)])
    for future in deleted.values():
        future.result(timeout=30)                             # retention deleted the whole interval

    state, tasks, took = _run_replay(hour, {"sinks": ["redis", "kafka"], "dry_run": False})
    assert state == "failed" and tasks == {"replay_interval": "failed"}, tasks
    alerts = [json.loads(m.value()) for m in _read_all(cfg, cfg.streaming.errors_topic)]
    assert [a["kind"] for a in alerts] == ["airflow_task_failure"], alerts  # one alert: no retries
    error = alerts[0]["error"]
    first_time = datetime.fromtimestamp((start_ms + HOUR_MS + 60_000) / 1000, UTC)
    assert "RangeNotRetained" in error and f"{source}-0: the range starts at offset 10" in error, error
    assert "the earliest retained offset is 10" in error, error
    assert f"(record time {first_time.isoformat()})" in error, error
    assert "docs/runbooks/airflow.md#range-no-longer-retained" in error
    assert _read_all(cfg, cfg.streaming.analyzed_topic) == []  # nothing written
    assert list(redis_client.scan_iter(match=f"{cfg.streaming.redis_prefix}:*")) == []
    print(f"range not retained: failed in {took}s with {error}")


def _ensure(cfg) -> tuple[str, dict[str, str]]:
    state, tasks, _ = _run("streaming_lifecycle", {"action": "ensure", "max_batch_age_s": 3600})
    return state, tasks


def _kill_group(pid: int | None) -> None:
    if pid and pid > 0:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _alive(pid: int) -> bool:
    from jobs.host.processes import alive

    return alive(pid)


def test_lifecycle_restarts_a_job_killed_with_kill_9_and_a_rebuilt_checkpoint_resumes_exactly(
        airflow_db, platform, redis_client):
    """streaming_lifecycle after a kill -9, then checkpoint_recovery after a lost checkpoint.

    The job the DAG started outlives ``kappa airflow down``; once killed, the health check
    fails at once (no retries) and, after the restart, judges only the new job's batches.

    One job history for both DAGs (each start of the job is a JVM start, the heaviest part of
    the suite): the records of the killed run and of the run on the rebuilt checkpoint must
    reach Redis and ``rsvps.analyzed`` once each, with no gap.
    """
    import shutil

    from airflow.sdk.exceptions import AirflowFailException

    from jobs.orchestration import tasks as tasks_layer
    from jobs.orchestration.local import LocalAirflow
    from jobs.orchestration.streaming import running_pid
    from jobs.streaming.state import checkpoint_path

    cfg = platform
    now_ms = int(time.time() * 1000)
    _produce(cfg, now_ms - 120_000, 150, 200, seed=7)
    pids: list[int] = []
    try:
        state, tasks = _ensure(cfg)
        first = running_pid(cfg)
        assert first, tasks
        pids.append(first)
        assert tasks["ensure_running"] == "success" and tasks["stop"] == "skipped", tasks
        assert state == "success", tasks   # check_health saw the job's metrics
        _wait("the first 150 records applied", lambda: _totals(redis_client, cfg).get("input") == 150, 300)
        LocalAirflow(cfg).down()           # `kappa airflow down` of the instance the task ran in
        assert running_pid(cfg) == first and _alive(first), "airflow down stopped the streaming job"

        os.killpg(first, signal.SIGKILL)
        _wait("the killed job's lock released", lambda: running_pid(cfg) is None, 60)
        began = time.monotonic()           # a dead job fails the health check at once, no retries
        with pytest.raises(AirflowFailException, match="not running"):
            tasks_layer.streaming_health(3600, 1_000_000)
        assert time.monotonic() - began < 15

        restarted_at = time.time()
        state, tasks = _ensure(cfg)
        second = running_pid(cfg)
        assert second and second != first, (first, second)
        pids.append(second)
        assert tasks["ensure_running"] == "success" and state == "success", tasks
        health = tasks_layer.streaming_health(3600, 1_000_000)  # judged on the new job's batches only
        judged_at = time.time()
        assert health["last_batch_age_s"] is None or judged_at - health["last_batch_age_s"] >= restarted_at, \
            (health, restarted_at, judged_at)
        state, tasks = _ensure(cfg)                        # idempotent: the same job, no second copy
        assert running_pid(cfg) == second and state == "success", tasks

        state, tasks, took = _run("streaming_lifecycle", {"action": "stop"})
        assert state == "success" and tasks["stop"] == "success", tasks
        assert running_pid(cfg) is None
        print(f"lifecycle: pid {first} killed -9, restarted as {second}, stopped in {took}s")

        # the checkpoint is lost (a disk replaced, a folder deleted): only the Redis fence remains
        checkpoint = checkpoint_path(cfg.lake.checkpoint_root, cfg.streaming.query_name)
        shutil.rmtree(checkpoint)
        _produce(cfg, now_ms - 30_000, 150, 100, seed=8)

        state, tasks, _ = _run("checkpoint_recovery", {"action": "rebuild", "dry_run": True})
        assert state == "success" and not checkpoint.exists(), tasks  # dry run: prints, changes nothing
        state, tasks, took = _run("checkpoint_recovery", {"action": "rebuild", "dry_run": False})
        assert state == "success", tasks
        assert checkpoint.exists()

        _ensure(cfg)
        pids.append(running_pid(cfg) or 0)
        _wait("all 300 records applied", lambda: _totals(redis_client, cfg).get("input") == 300, 300)
        assert _run("streaming_lifecycle", {"action": "stop"})[0] == "success"
    finally:
        for pid in pids:
            _kill_group(pid)
    positions = _analyzed_positions(cfg)
    totals = _totals(redis_client, cfg)
    assert totals["input"] == 300, totals
    # the kill -9 may leave a batch's analyzed records written twice (documented: at least once,
    # keyed); the Redis counts are exact, and by position every record is there
    assert len(set(positions)) == totals["valid"], "a valid record is missing from rsvps.analyzed"
    dlq = {(int(dict(m.headers())["kappa.source_partition"]), int(dict(m.headers())["kappa.source_offset"]))
           for m in _read_all(cfg, cfg.streaming.dlq_topic)}
    assert len(set(positions)) + len(dlq) == 300            # no gap: every offset, here or in the DLQ
    print(f"rebuild in {took}s; analyzed {len(positions)} ({len(set(positions))} distinct) "
          f"+ dlq {len(dlq)} = 300")


def test_load_quality_maintenance_and_backfill_dry_run_each_run_end_to_end(airflow_db, platform):
    cfg = platform
    _produce(cfg, int(time.time() * 1000) - 60_000, 90, 500, seed=9)
    took: dict[str, float] = {}

    state, tasks, took["kafka_to_delta"] = _run("kafka_to_delta")
    assert state == "success" and set(tasks.values()) == {"success"}, tasks
    assert _delta_rows(cfg) == 90
    state, tasks, took["data_quality"] = _run("data_quality")
    assert state == "success", tasks
    state, tasks, took["delta_maintenance"] = _run("delta_maintenance")
    assert state == "success", tasks
    state, tasks, took["backfill"] = _run("backfill", {
        "starting_offsets": '{"0": 0, "1": 0, "2": 0}', "ending_offsets": '{"0": 30, "1": 30, "2": 30}',
        "sinks": ["delta", "redis", "kafka"], "dry_run": True})
    assert state == "success", tasks
    state, tasks, took["checkpoint_recovery"] = _run("checkpoint_recovery", {"action": "inspect"})
    assert state == "success", tasks
    assert _delta_rows(cfg) == 90  # the dry runs wrote nothing
    assert _read_all(cfg, cfg.streaming.analyzed_topic) == []
    print(f"dag.test durations: {took}")
