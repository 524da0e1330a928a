"""The DAG factory (dags/pipeline_factory.py): each engine pipeline's DAGs from its pipeline.yaml alone.

Pipelines are written into the test's folder and found through KAPPA_PIPELINES_PATH, as an
operator's would be; the DagBag parses dags/pipeline_factory.py with that variable set. The last test
runs the stream DAG of a tiny pipeline against the session's stack with ``dag.test()``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.dags import test_dag_runs as runs
from tests.dags.conftest import DAGS, patched_environ
from tests.integration.pipelines.tiny import write_tiny

airflow_db = runs.airflow_db  # the module fixture of the other dag.test runs
FACTORY = DAGS / "pipeline_factory.py"
SHIPPED = {f"pipeline_cards_{what}" for what in ("stream", "load", "gold", "reconcile")}
FULL = """\
name: full
description: a pipeline with gold tables and reconcile entries
code: pipeline.py
source: {topic: full.in, key: id}
outputs:
  analyzed: {topic: full.out, key: id}
  dlq: {topic: full.dlq, partitions: 1}
streaming: {query_name: full-live, redis_prefix: full}
views:
  colours: {kind: counter, key: colour}
tables:
  silver.full: {topic: full.out, dedup_key: [id]}
  gold.full_daily: {gold: colours_daily}
reconcile:
  colours: colours_lake
schedules: {load: "*/7 * * * *", gold: "15 3 * * *"}
"""
# importing this would leave a file behind: the factory must never import a pipeline's code
TRAP = "from pathlib import Path\nPath(__file__).with_name('imported').write_text('yes')\n"


def _write(root: Path, name: str, spec: str, code: str = TRAP) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "pipeline.yaml").write_text(spec)
    (folder / "pipeline.py").write_text(code)
    return folder


def _parse(root: Path) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    with patched_environ({"KAPPA_PIPELINES_PATH": str(root)}):
        return DagBag(dag_folder=str(FACTORY))


def _expression(dag) -> str | None:
    return getattr(dag.timetable, "expression", None)


def _edges(dag) -> set[tuple[str, str]]:
    return {(task.task_id, down) for task in dag.tasks for down in task.downstream_task_ids}


def test_each_pipeline_gets_its_dags_tagged_and_scheduled_from_its_yaml(tmp_path):
    full = _write(tmp_path, "full", FULL)
    tiny_folder, tiny, _ = write_tiny(tmp_path)
    (tiny_folder / "pipeline.py").write_text(TRAP)
    _write(tmp_path, "own", FULL.replace("full", "own").replace(
        "streaming: {query_name: own-live,", "streaming: {job: kappa-stream, query_name: own-live,"))

    bag = _parse(tmp_path)

    assert bag.import_errors == {}
    made = {dag_id for dag_id in bag.dag_ids if dag_id.startswith("pipeline_")}
    assert made == SHIPPED | {f"pipeline_full_{w}" for w in ("stream", "load", "gold", "reconcile")} | {
        f"pipeline_{tiny}_stream", f"pipeline_{tiny}_load"}   # no gold, no reconcile; `own` runs kappa stream
    for dag_id in made:
        dag = bag.dags[dag_id]
        _, name, what = dag_id.split("_", 2)
        assert set(dag.tags) == {"kappa", "pipeline", name, what}, dag_id
        assert dag.doc_md.startswith(f"# {dag_id}\n") and dag.catchup is False and dag.max_active_runs == 1
        for task in dag.tasks:
            assert task.owner == "data-platform" and task.retries >= 1 and task.on_failure_callback, dag_id
    dags = bag.dags
    assert dags["pipeline_full_stream"].timetable.delta == timedelta(minutes=5)
    assert (type(dags["pipeline_full_load"].timetable).__name__, _expression(dags["pipeline_full_load"])) == (
        "CronTriggerTimetable", "*/7 * * * *")
    assert (type(dags["pipeline_full_gold"].timetable).__name__, _expression(dags["pipeline_full_gold"])) == (
        "CronDataIntervalTimetable", "15 3 * * *")
    assert _expression(dags[f"pipeline_{tiny}_load"]) == "*/15 * * * *"   # the default of schedules.load
    assert _expression(dags["pipeline_full_reconcile"]) == "30 2 * * *"
    stream = dags["pipeline_full_stream"]
    assert _edges(stream) == {("choose", "ensure_running"), ("choose", "stop"),
                              ("ensure_running", "check_health")}
    assert stream.params["action"] == "ensure" and stream.get_task("ensure_running").retries == 5
    assert [t.task_id for t in dags["pipeline_full_gold"].tasks] == ["gold"]
    assert not (full / "imported").exists() and not (tiny_folder / "imported").exists()


def test_a_broken_pipeline_gets_no_dag_and_breaks_nothing(tmp_path, caplog):
    _write(tmp_path, "unreadable", "name: [unreadable\n")
    no_streaming = FULL.replace("streaming: {query_name: full-live, redis_prefix: full}\n", "")
    assert no_streaming != FULL
    _write(tmp_path, "invalid", no_streaming.replace("full", "invalid"))
    _write(tmp_path, "badcron", FULL.replace("full", "badcron").replace('"*/7 * * * *"', '"every 7 minutes"'))
    _write(tmp_path, "full", FULL)

    with caplog.at_level(logging.WARNING):
        bag = _parse(tmp_path)

    assert bag.import_errors == {}
    assert {d for d in bag.dag_ids if d.startswith("pipeline_")} == SHIPPED | {
        f"pipeline_full_{w}" for w in ("stream", "load", "gold", "reconcile")}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for name in ("unreadable", "invalid", "badcron"):
        lines = [line for line in warned if line.startswith(f"pipeline {name}")]
        assert len(lines) == 1 and "no DAGs" in lines[0], (name, warned)


def test_a_failing_command_fails_the_task_with_its_error_and_a_wrong_name_without_retries():
    from airflow.sdk.exceptions import AirflowFailException

    from jobs.orchestration.pipeline_tasks import run_pipelines_command

    with pytest.raises(AirflowFailException) as failed:
        run_pipelines_command("gold", "nosuch", "--date", "2026-03-01", "--json")
    message = str(failed.value)
    assert "`kappa pipelines gold nosuch --date 2026-03-01 --json` exited with 2" in message, message
    assert "error: no pipeline 'nosuch'" in message, message


def _lock_pid(cfg, query: str) -> int | None:
    from jobs.streaming.state import checkpoint_path, lock_holder

    return lock_holder(checkpoint_path(cfg.lake.checkpoint_root, query))


def _fenced(redis_client, prefix: str, topic: str) -> int:
    fence = redis_client.hgetall(f"{prefix}:fence")
    return sum(int(v) for k, v in fence.items() if k.decode().rpartition(":")[0] == topic)


def _run_stream(dag_id: str, conf: dict[str, Any]) -> tuple[str, dict[str, str]]:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(FACTORY)).get_dag(dag_id)
    assert dag is not None, dag_id
    run = dag.test(run_conf=conf)
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    print(f"dag.test({dag_id}, {conf}) -> {run.state} {states}")
    return str(run.state), states


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_stream_dag_starts_a_live_run_that_applies_records_and_its_stop_action_stops_it(
        airflow_db, stack, kappa_env, redis_client, kafka_props, tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from jobs.host.processes import alive
    from jobs.orchestration.pipeline_tasks import check_health
    from tests.conftest import delete_topics

    _, name, source = write_tiny(tmp_path / "pipelines")
    dag_id, query = f"pipeline_{name}_stream", f"{name}-live"
    env = {**kappa_env, "KAPPA_PIPELINES_PATH": str(tmp_path / "pipelines"),
           "KAPPA_STACK__DATA_DIR": str(tmp_path / "stack"), "KAPPA_LAKE__ROOT": str(tmp_path / "lake"),
           "KAPPA_LAKE__CHECKPOINT_ROOT": str(tmp_path / "checkpoints"),
           "KAPPA_AIRFLOW_INSTANCE": str(tmp_path / "airflow")}
    pid = None
    with patched_environ(env):
        from jobs.config.load import load_config

        cfg = load_config()
        try:
            state, tasks = _run_stream(dag_id, {"action": "ensure", "max_batch_age_s": 3600})
            assert (state, tasks["ensure_running"], tasks["check_health"], tasks["stop"]) == (
                "success", "success", "success", "skipped"), tasks
            pid = _lock_pid(cfg, query)
            assert pid and alive(pid), "no process holds the query's lock"
            log = tmp_path / "stack" / "logs" / f"stream-{query}.log"
            assert log.is_file()
            assert _run_stream(dag_id, {"action": "ensure", "max_batch_age_s": 3600})[0] == "success"
            assert _lock_pid(cfg, query) == pid   # idempotent: the same run, no second one

            producer = Producer(kafka_props)
            for i in range(30):
                producer.produce(source, json.dumps({"id": i, "colour": "red", "t": 1_700_000_000_000 + i}),
                                 str(i).encode())
            assert producer.flush(30) == 0
            del producer
            deadline = time.monotonic() + 300
            while _fenced(redis_client, name, source) < 30:
                assert time.monotonic() < deadline and alive(pid), log.read_text()[-3000:]
                time.sleep(1)
            assert _fenced(redis_client, name, source) == 30
            time.sleep(3)   # the batch's metrics follow its fence
            health = check_health(name, 3600, 0)
            judged = (health["query"], health["pid"], health["offsets_behind_latest"])
            assert judged == (query, pid, 0), health
            assert health["batch_id"] is not None, health   # judged on this run's own batches

            state, tasks = _run_stream(dag_id, {"action": "stop"})
            assert (state, tasks["stop"], tasks["ensure_running"]) == ("success", "success", "skipped"), tasks
            assert _lock_pid(cfg, query) is None   # released once its last batch is done
            deadline = time.monotonic() + 120      # then Spark shuts down and the process exits
            while alive(pid):
                assert time.monotonic() < deadline, f"pid {pid} still runs: {log.read_text()[-2000:]}"
                time.sleep(1)
        finally:
            if pid and alive(pid):
                os.killpg(pid, signal.SIGKILL)
            delete_topics(AdminClient(kafka_props), [source, f"{source}.out", f"{source}.dlq"])
