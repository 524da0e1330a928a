"""The batch DAGs: schedule (daily data intervals or the loads' Assets), tasks, outlets, the
dates a run recomputes, and a real ``dag.test()`` run of ``batch_gold`` on a small lake."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime

import attrs
import pytest
from deltalake import DeltaTable

from jobs.batch.tasks import dates_of_run, event_dates
from jobs.errors import ConfigError
from tests.dags.test_dag_runs import (  # noqa: F401 (fixtures)
    _produce,
    _read_all,
    _run,
    airflow_db,
    asset_events,
    platform,
)
from tests.integration.batch.support import silver_row, write_silver

GOLD = {"city_daily": "gold.city_daily", "topic_daily": "gold.topic_daily", "event_stats": "gold.event_stats"}


@pytest.mark.parametrize(("dag_id", "watched", "outlets"), [
    ("batch_gold", {"delta://kappa/silver/rsvps", "delta://kappa/bronze/rsvps_raw"},
     {job: {f"delta://kappa/{table.replace('.', '/')}"} for job, table in GOLD.items()}),
    ("batch_ops", {"delta://kappa/ops/dlq"}, {"dlq_daily": {"delta://kappa/ops/dlq_daily"}}),
])
def test_daily_intervals_or_the_loads_assets_and_one_task_per_table(dagbag, dag_id, watched, outlets):
    dag = dagbag.dags[dag_id]
    schedule = dag.timetable
    assert type(schedule).__name__ == "AssetOrTimeSchedule"
    assert type(schedule.timetable).__name__ == "CronDataIntervalTimetable"
    assert attrs.asdict(schedule.timetable) == {"expression": "0 0 * * *", "timezone": "UTC"}
    assert {asset.uri for asset in schedule.asset_condition.objects} == watched
    assert {task.task_id: {asset.uri for asset in task.outlets} for task in dag.tasks} == outlets
    assert all(not task.upstream_task_ids for task in dag.tasks)   # tables are independent


def test_a_run_recomputes_its_interval_or_the_dates_its_asset_events_name():
    """With ``dag_run.run_type`` as a task gets it: the Task SDK's enum (whose ``str()`` is
    ``DagRunType.ASSET_TRIGGERED``), the core's, or either ``str()``."""
    from airflow.sdk.api.datamodels._generated import DagRunType
    from airflow.utils.types import DagRunType as CoreDagRunType

    day = datetime(2026, 1, 2, tzinfo=UTC)
    assert dates_of_run(DagRunType.SCHEDULED, day, datetime(2026, 1, 3, tzinfo=UTC), []) == [
        date(2026, 1, 2)]
    assert dates_of_run(DagRunType.BACKFILL, day, datetime(2026, 1, 5, tzinfo=UTC), []) == [
        date(2026, 1, 2), date(2026, 1, 3), date(2026, 1, 4)]
    extras = [{"dates": ["2026-01-03", "2025-12-30"], "versions": [4]}, {}, {"dates": ["2026-01-03"]}]
    for run_type in (DagRunType.ASSET_TRIGGERED, str(DagRunType.ASSET_TRIGGERED),
                     CoreDagRunType.ASSET_TRIGGERED, str(CoreDagRunType.ASSET_TRIGGERED)):
        assert dates_of_run(run_type, None, None, extras) == [date(2025, 12, 30), date(2026, 1, 3)], run_type
    assert event_dates([{"versions": [1]}]) == []
    with pytest.raises(ConfigError, match="a manual run has no data interval"):
        dates_of_run(DagRunType.MANUAL, None, None, [])


@pytest.mark.slow
def test_batch_gold_run_for_one_date_writes_that_partition_of_every_gold_table(
        airflow_db, kappa_env, tmp_path, monkeypatch):  # noqa: F811 (the fixture)
    root = str(tmp_path / "lake")
    for key, value in {**kappa_env, "KAPPA_LAKE__ROOT": root}.items():
        monkeypatch.setenv(key, value)
    write_silver(root, [silver_row(1, 1, 9), silver_row(2, 2, 9, guests=2),
                        silver_row(3, 2, 10, city="Madrid"), silver_row(4, 3, 9)])
    # a manual run at 2026-01-03T00:00 gets the @daily interval that ended then: [01-02, 01-03)
    state, tasks, _ = _run("batch_gold", logical_date=datetime(2026, 1, 3, tzinfo=UTC))
    assert state == "success" and set(tasks.values()) == {"success"}, tasks
    for table in GOLD.values():
        rows = DeltaTable(os.path.join(root, *table.split("."))).to_pyarrow_table().to_pylist()
        assert {str(row["event_date"]) for row in rows} == {"2026-01-02"}, table
    city = DeltaTable(os.path.join(root, "gold", "city_daily")).to_pyarrow_table().to_pylist()
    assert sorted((row["city"], row["rsvps"], row["guests"]) for row in city) == [
        ("Barcelona", 1, 2), ("Madrid", 1, 0)]


def test_reconcile_runs_daily_after_the_batch_and_has_one_task(dagbag):
    dag = dagbag.dags["reconcile"]
    assert type(dag.timetable).__name__ == "CronTriggerTimetable"
    assert attrs.asdict(dag.timetable)["expression"] == "30 1 * * *"
    assert [task.task_id for task in dag.tasks] == ["compare_views"]


@pytest.mark.slow
def test_kafka_to_delta_publishes_the_tables_it_changed_with_their_dates_and_nothing_else(
        airflow_db, platform):  # noqa: F811 (the fixtures)
    """One event for bronze (the one table loaded) naming the dates it changed; none for the
    tables it did not change; a run that loads nothing publishes nothing."""
    import time

    cfg = platform
    before = asset_events()
    _produce(cfg, int(time.time() * 1000) - 60_000, 30, 500, seed=5)
    state, tasks, _ = _run("kafka_to_delta")
    assert state == "success", tasks
    bronze = DeltaTable(os.path.join(cfg.lake.root, "bronze", "rsvps_raw")).to_pyarrow_table()
    loaded = sorted({str(day) for day in bronze.column("event_date").to_pylist()})
    published = asset_events()
    new = {uri: extras[len(before.get(uri, [])):] for uri, extras in published.items()}
    assert {uri: extras for uri, extras in new.items() if extras} == {
        "delta://kappa/bronze/rsvps_raw": [{"dates": loaded, "versions": [0]}]}
    state, tasks, _ = _run("kafka_to_delta")  # nothing new in Kafka: nothing changed
    assert state == "success", tasks
    assert asset_events() == published


@pytest.mark.slow
def test_reconcile_fails_unretried_with_one_alert_on_a_drift(airflow_db, platform, redis_client, spark,  # noqa: F811
                                                             tmp_path):
    import json

    from tests.integration.batch.expected import live_views, rsvp_lines, stream, two_days_before
    from tests.integration.batch.pipeline import PARTITIONS, Platform, loader_tables

    cfg = platform
    topics = {key: getattr(cfg.streaming, key) for key in PARTITIONS}
    env = {key: value for key, value in os.environ.items() if key.startswith("KAPPA_")}
    real = Platform({**env, "KAPPA_LOADER__TABLES": loader_tables(topics)}, tmp_path / "platform")
    real.collect([line.value for line in rsvp_lines(120, *two_days_before(datetime.now(UTC).date()))])
    real.stream()
    real.load(spark)
    views = live_views(stream(real.read("source_topic"))[0])
    city_key, event_key = min(views["city_window"]), min(views["event"])
    _, start, city = city_key.split("/", 2)
    prefix = cfg.streaming.redis_prefix
    redis_client.hset(f"{prefix}:cities:{start}", city, views["city_window"][city_key] + 5)
    redis_client.delete(f"{prefix}:event:{event_key.split('/', 1)[1]}")
    state, tasks, _ = _run("reconcile")
    assert (state, tasks) == ("failed", {"compare_views": "failed"})
    alerts = [json.loads(message.value()) for message in _read_all(cfg, cfg.streaming.errors_topic)]
    assert [(alert["dag_id"], alert["task_id"], alert["try_number"]) for alert in alerts] == [
        ("reconcile", "compare_views", 1)]
    error = alerts[0]["error"]
    assert "ViewsDrift: 2 live view key(s)" in error, error
    assert f"redis:{city_key}" in error and f"redis:{event_key}" in error, error
