"""DagBag, policy and structure tests of dags/ (STYLE.md 9-10)."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from tests.dags.conftest import DAGS, patched_environ

# dags/pipeline_factory.py: the shipped engine pipeline `cards` (pipelines/cards/pipeline.yaml) gets all four
PIPELINE_DAGS = {f"pipeline_cards_{what}" for what in ("stream", "load", "gold", "reconcile")}
EXPECTED = {"streaming_lifecycle", "kafka_to_delta", "data_quality", "delta_maintenance", "replay",
            "backfill", "checkpoint_recovery", "reprocess", "batch_gold", "batch_ops", "reconcile",
            *PIPELINE_DAGS}
MANUAL = {"backfill", "checkpoint_recovery", "reprocess"}
# the DAGs of the default pipeline `kappa stream` runs (pipelines.default: rsvp, pipelines/rsvp/pipeline.yaml)
STREAM_PIPELINE_DAGS = {"streaming_lifecycle", "backfill", "batch_gold", "batch_ops", "reconcile"}


def test_every_dag_imports_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == EXPECTED


def test_parsing_imports_nothing_heavy(dagbag_and_imports):
    assert dagbag_and_imports[1] == []


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_policy(dagbag, dag_id):
    dag = dagbag.dags[dag_id]
    assert dag.doc_md and dag.doc_md.lstrip().startswith(f"# {dag_id}")
    assert "kappa" in dag.tags and len(dag.tags) >= 2
    assert dag.catchup is False
    assert dag.max_active_runs == 1
    for task in dag.tasks:
        assert task.owner == "data-platform", task.task_id
        assert task.retries >= 1, task.task_id
        assert task.on_failure_callback, task.task_id


def test_schedules(dagbag):
    import attrs

    def timetable(dag_id: str) -> tuple[str, dict]:
        table = dagbag.dags[dag_id].timetable
        return type(table).__name__, attrs.asdict(table) if attrs.has(type(table)) else {}

    assert timetable("replay")[0] == "BackfillIntervals"  # below: what the scheduler reads of it
    assert timetable("delta_maintenance")[0] == "CronTriggerTimetable"
    assert timetable("kafka_to_delta")[0] == "CronTriggerTimetable"
    assert timetable("data_quality")[0] == "AssetTriggeredTimetable"
    assert dagbag.dags["streaming_lifecycle"].timetable.delta == timedelta(minutes=5)
    for dag_id in MANUAL:
        assert dagbag.dags[dag_id].timetable is None or timetable(dag_id)[0] == "NullTimetable"


def test_the_scheduler_makes_no_run_of_replay_and_a_backfill_gets_every_hour(dagbag):
    """What Airflow's scheduler and its backfill read of ``replay``: the serialized DAG (the
    timetable comes back through the plugin that registers it)."""
    import pendulum
    from airflow.serialization.serialized_objects import DagSerialization

    dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dagbag.dags["replay"]))
    assert type(dag.timetable).__name__ == "BackfillIntervals" and dag.timetable.periodic
    assert dag.next_dagrun_info(last_automated_run_info=None) is None  # unpaused: no run of its own
    start = pendulum.datetime(2026, 3, 1, 22, tz="UTC")
    infos = list(dag.iter_dagrun_infos_between(start, start + timedelta(hours=2)))  # both included
    # hourly data intervals (start -> end), not CronTriggerTimetable's zero-length ones
    assert [(info.data_interval.start, info.data_interval.end) for info in infos] == [
        (start + timedelta(hours=h), start + timedelta(hours=h + 1)) for h in range(3)]
    manual = dag.timetable.infer_manual_data_interval(run_after=start)
    assert (manual.start, manual.end) == (start - timedelta(hours=1), start)


def _edges(dag) -> set[tuple[str, str]]:
    return {(task.task_id, down) for task in dag.tasks for down in task.downstream_task_ids}


def test_streaming_lifecycle_structure(dagbag):
    dag = dagbag.dags["streaming_lifecycle"]
    assert _edges(dag) == {("choose", "ensure_running"), ("choose", "stop"),
                           ("ensure_running", "check_health")}
    ensure = dag.get_task("ensure_running")
    assert ensure.retries == 5 and ensure.retry_exponential_backoff
    assert dag.params["action"] == "ensure"


def test_loads_publish_the_tables_through_one_alias_and_quality_runs_on_them(dagbag):
    load = dagbag.dags["kafka_to_delta"]
    assert _edges(load) == {("load", "publish_assets")}
    for dag_id, task_id in (("kafka_to_delta", "publish_assets"), ("replay", "replay_interval"),
                            ("backfill", "replay_offsets")):
        outlets = dagbag.dags[dag_id].get_task(task_id).outlets
        assert [(type(o).__name__, o.name) for o in outlets] == [("AssetAlias", "kappa-delta-loads")], dag_id
    quality = dagbag.dags["data_quality"]
    condition = quality.timetable.asset_condition
    assert type(condition).__name__ == "AssetAny"
    assert {asset.uri for asset in condition.objects} == {
        "delta://kappa/bronze/rsvps_raw", "delta://kappa/ops/dlq", "delta://kappa/silver/rsvps",
        "delta://kappa/gold/rsvp_summaries"}


def test_replay_and_backfill_params(dagbag):
    replay = dagbag.dags["replay"]
    assert [t.task_id for t in replay.tasks] == ["replay_interval"]
    assert replay.params["sinks"] == ["delta"] and replay.params["dry_run"] is False
    backfill = dagbag.dags["backfill"]
    assert backfill.params["dry_run"] is True
    assert {"starting_offsets", "ending_offsets", "sinks"} <= set(backfill.params.keys())
    recovery = dagbag.dags["checkpoint_recovery"]
    assert recovery.params["dry_run"] is True and recovery.params["action"] == "inspect"


def test_reprocess_structure_waits_without_a_slot_and_gates_promote_on_a_human(dagbag):
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    dag = dagbag.dags["reprocess"]
    assert _edges(dag) == {("start", "wait_caught_up"), ("wait_caught_up", "diff"), ("diff", "approve"),
                           ("approve", "promote"), ("promote", "grace"), ("promote", "retire_previous"),
                           ("grace", "retire_previous")}
    for sensor in ("wait_caught_up", "grace"):
        assert dag.get_task(sensor).mode == "reschedule", sensor
    approve = dag.get_task("approve")
    assert isinstance(approve, ApprovalOperator) and approve.options == ["Approve", "Reject"]
    assert not approve.fail_on_reject  # a rejection skips promote and retire: nothing fails
    assert dag.params["max_behind"] is None and dag.params["grace_minutes"] == 60
    schema = dag.params.get_param("version").schema
    assert schema["type"] == "integer" and schema["minimum"] == 2


def test_the_stream_pipelines_dags_document_its_own_names(dagbag):
    docs = {dag_id: dagbag.dags[dag_id].doc_md for dag_id in STREAM_PIPELINE_DAGS}
    assert all("pipeline `rsvp`" in doc for doc in docs.values()), docs
    assert ("`gold.city_daily`, `gold.topic_daily` and `gold.event_stats`" in docs["batch_gold"]
            and "(`bronze.rsvps_raw` and `silver.rsvps`," in docs["batch_gold"])
    assert "`ops.dlq_daily`" in docs["batch_ops"] and "changed `ops.dlq`" in docs["batch_ops"]
    assert "query `rsvps-live`" in docs["streaming_lifecycle"]
    assert "`rsvps.summaries`" in docs["streaming_lifecycle"]
    assert "offset range** of `rsvps.raw`" in docs["backfill"]
    assert "`silver.rsvps`" in docs["reconcile"] and "`members`: distinct members" in docs["reconcile"]
    assert dagbag.dags["backfill"].params["starting_offsets"] == '{"0": 0, "1": 0, "2": 0}'  # 3 partitions
    assert all({"pipeline", "rsvp"} <= set(dagbag.dags[dag_id].tags) for dag_id in STREAM_PIPELINE_DAGS)


def test_without_a_valid_default_pipeline_every_file_parses_and_its_dags_are_left_out(tmp_path, caplog):
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "pipeline.yaml").write_text("name: broken\nsource: {topic: broken.in}\n")
    env = {"KAPPA_PIPELINES_PATH": str(tmp_path), "KAPPA_PIPELINES__DEFAULT": "broken"}
    with patched_environ(env), caplog.at_level(logging.WARNING):
        bag = DagBag(dag_folder=str(DAGS))

    assert bag.import_errors == {}
    assert set(bag.dag_ids) == EXPECTED - STREAM_PIPELINE_DAGS
    assert bag.dags["data_quality"].timetable.asset_condition.objects == ()   # no tables, no trigger
    warned = {r.getMessage() for r in caplog.records if r.name == "jobs.orchestration.dagkit"}
    assert len(warned) == 1 and "pipeline broken" in next(iter(warned)) and "outputs" in next(iter(warned))
