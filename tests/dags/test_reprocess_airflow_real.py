"""The ``reprocess`` DAG in the real Airflow from ``kappa airflow up`` (the module fixture of
tests/dags/test_airflow_real.py), approved through the REST API as the Required Actions page does.

The Airflow's task processes get this module's own source topic, output topics, Redis prefix,
query name and view pointer topic (``KAPPA_*`` set before ``up``), so promoting and retiring
touches nothing of the session's other tests. Version 1 runs live; a REST-triggered run builds
version 2, parks ``approve`` in ``awaiting_input`` until the test answers, then promotes and
retires version 1.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import delete_topics
from tests.dags import test_airflow_real as real
from tests.dags.conftest import patched_environ
from tests.dags.test_dag_runs import _kill_group, _produce, _totals, _wait

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
airflow, api = real.airflow, real.api  # `kappa airflow up` once for this module


@pytest.fixture(scope="module")
def spark_service() -> Iterator[None]:
    """No Spark service: the reprocess DAG's jobs run live, each on a Spark of its own."""
    yield


@pytest.fixture(scope="module")
def instance_env() -> dict[str, str]:
    """The KAPPA_* that `real.airflow` puts on top of this module's environment at `up`."""
    return real.BACKFILL_ENV
EVENTS = 1_500
RUNS = "/api/v2/dags/reprocess/dagRuns"


def _xcom(api: Any, run_id: str, task_id: str) -> Any:
    got = api.get(f"{RUNS}/{run_id}/taskInstances/{task_id}/xcomEntries/return_value",
                  params={"deserialize": True})
    assert got.status_code == 200, got.text
    return got.json()["value"]


@pytest.fixture(scope="module", autouse=True)
def reprocess_env(stack, kappa_env, kafka_props) -> Iterator[dict[str, str]]:
    """Topics, prefix, query and pointer of this module, in os.environ before ``kappa airflow up``."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = uuid.uuid4().hex[:8]
    topics = {"analyzed_topic": (f"analyzed.r{name}", 3), "summaries_topic": (f"summaries.r{name}", 3),
              "dlq_topic": (f"dlq.r{name}", 1), "views_topic": (f"views.r{name}", 1)}
    env = {**kappa_env, **real.BACKFILL_ENV,
           **{f"KAPPA_STREAMING__{key.upper()}": topic for key, (topic, _) in topics.items()},
           "KAPPA_STREAMING__QUERY_NAME": f"rq-{name}", "KAPPA_STREAMING__REDIS_PREFIX": f"r{name}",
           "KAPPA_STREAMING__TRIGGER_S": "0.5"}
    admin = AdminClient(kafka_props)
    source = real.BACKFILL_TOPIC
    present = set(admin.list_topics(timeout=15).topics)
    wanted = [NewTopic(t, n, 1) for t, n in [*topics.values(), (source, 3)] if t not in present]
    for future in admin.create_topics(wanted).values():
        future.result(timeout=30)
    try:
        with patched_environ(env):
            yield env
    finally:
        delete_topics(admin, [t for t, _ in topics.values()])


def _wait_for(what: str, get, timeout_s: float = 600) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = get()
        if found:
            return found
        time.sleep(3)
    raise AssertionError(f"{what} not reached within {timeout_s:.0f}s")


def _source_count(cfg) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**cfg.kafka.client_config(), "group.id": "reprocess-real-count"})
    topic = cfg.streaming.source_topic
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        marks = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions]
    finally:
        consumer.close()
    return sum(high - low for low, high in marks)


def _park_processed(home: str, run_id: str) -> bool:
    """Whether the scheduler has processed the exit of the process that parked ``approve``.

    Airflow 3.3.2's scheduler reads that exit, when it arrives after the answer has already resumed
    the task, as the task killed externally, and retries it (the human is asked again). A human
    answers later than that; the test waits for the scheduler's line saying it saw the exit.
    """
    line = f"TaskInstance Finished: dag_id=reprocess, task_id=approve, run_id={run_id}"
    log = Path(home) / "logs" / "scheduler.out"
    return log.exists() and line in log.read_text(errors="replace")


def _pending_approval(api, run_id: str) -> dict | None:
    details = api.get(f"{RUNS}/{run_id}/hitlDetails", params={"response_received": False}).json()
    return next(iter(details.get("hitl_details", [])), None)


def test_reprocess_dag_in_the_real_airflow_waits_for_a_human_then_promotes(
        airflow, api, redis_client, kafka_props):
    from confluent_kafka.admin import AdminClient

    from jobs.config.load import load_config
    from jobs.orchestration.streaming import ensure_streaming, running_pid
    from jobs.reprocess.core import job_pid
    from jobs.views.versions import read_views, version_config

    cfg = load_config()
    s, v2 = cfg.streaming, version_config(cfg, 2).streaming
    _produce(cfg, int(time.time() * 1000) - 300_000, EVENTS, 100, seed=37)
    total = _source_count(cfg)  # the backfill test of the other module may have written here too
    try:
        ensure_streaming()
        _wait("version 1 applied every event", lambda: _totals(redis_client, cfg).get("input") == total, 600)
        _wait_for("DAG reprocess listed", lambda: api.get("/api/v2/dags/reprocess").status_code == 200)
        assert api.patch("/api/v2/dags/reprocess", json={"is_paused": False}).status_code == 200
        created = api.post(RUNS, json={"logical_date": None,
                                       "conf": {"version": 2, "max_behind": 0, "grace_minutes": 0}})
        assert created.status_code in (200, 201), created.text
        run_id = created.json()["dag_run_id"]

        pending = _wait_for("the approval request", lambda: _pending_approval(api, run_id), 900)
        approve = api.get(f"{RUNS}/{run_id}/taskInstances/approve").json()
        assert approve["state"] == "awaiting_input", approve
        assert "0 changed" in pending["body"], pending["body"]
        _wait_for("the scheduler saw approve parked", lambda: _park_processed(airflow["home"], run_id), 120)
        answer = api.patch(f"{RUNS}/{run_id}/taskInstances/approve/-1/hitlDetails",
                           json={"chosen_options": ["Approve"], "params_input": {}})
        assert answer.status_code == 200, answer.text

        run = _wait_for("the run's end", lambda: (r := api.get(f"{RUNS}/{run_id}").json())["state"]
                        in ("success", "failed") and r, 900)
        tasks = {ti["task_id"]: ti["state"] for ti in
                 api.get(f"{RUNS}/{run_id}/taskInstances").json()["task_instances"]}
        assert run["state"] == "success" and set(tasks.values()) == {"success"}, tasks
        assert api.get(f"{RUNS}/{run_id}/taskInstances/approve").json()["try_number"] == 1  # asked once
        assert pending["subject"] == "Promote view version 2?"
        counts = _xcom(api, run_id, "diff")
        report = json.loads(Path(counts["report"]).read_text())
        assert Path(counts["report"]).parent == Path(cfg.stack.data_dir) / "reprocess"
        assert (counts["keys_changed"], counts["only_in_current"], counts["only_in_version"]) == (0, 0, 0)
        assert counts["keys_equal"] == report["keys_equal"] > 50
        assert report["totals"]["version"]["input"] == total
        promoted = _xcom(api, run_id, "promote")
        assert (promoted["current"], promoted["previous"], promoted["previous_job_stopped"]) == (2, 1, True)
        assert _xcom(api, run_id, "approve")["chosen_options"] == ["Approve"]
        views = read_views(cfg)
        assert views.current == 2 and views.state(1) == "retired"
        assert running_pid(cfg) is None
        assert list(redis_client.scan_iter(match=f"{s.redis_prefix}:*")) == []
        assert int(redis_client.hget(f"{v2.redis_prefix}:totals", "input")) == total
        present = set(AdminClient(kafka_props).list_topics(timeout=15).topics)
        assert {s.analyzed_topic, s.summaries_topic, s.dlq_topic}.isdisjoint(present)   # retired
        assert {v2.analyzed_topic, v2.summaries_topic} <= present
        print(f"reprocess in the real Airflow: {tasks}, approved by {answer.json()['responded_by']}")
    finally:
        _kill_group(running_pid(cfg))
        _kill_group(job_pid(version_config(cfg, 2)))
        delete_topics(AdminClient(kafka_props), [v2.analyzed_topic, v2.summaries_topic, v2.dlq_topic])
        for prefix in (s.redis_prefix, v2.redis_prefix):
            for key in redis_client.scan_iter(match=f"{prefix}:*"):
                redis_client.unlink(key)
