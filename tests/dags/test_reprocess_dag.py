"""The ``reprocess`` DAG end to end under ``dag.test()``, the approval given through the HITL REST API.

Version 1 runs live over a small topic (started as ``streaming_lifecycle`` starts it); the DAG
builds version 2 with the same code beside it, waits for catch-up, diffs, waits for a human,
promotes, waits a grace period of 0 and retires version 1. The human is this test: while
``dag.test()`` keeps the run alive with ``approve`` in AWAITING_INPUT, a thread answers the
pending Human-in-the-loop request through Airflow's own Core API (the app an api-server serves,
in process over this test's metadata DB), exactly as the Required Actions page does.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import delete_topics
from tests.dags import test_dag_runs as runs
from tests.dags.conftest import patched_environ
from tests.dags.test_dag_runs import _kill_group, _produce, _run, _totals, _wait

airflow_db, platform = runs.airflow_db, runs.platform  # the module fixtures of the other dag.test runs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
EVENTS = 2_000
API = "/api/v2/dags/reprocess/dagRuns"


@pytest.fixture()
def views_platform(platform, topic_factory) -> Iterator[Any]:
    """``platform`` with a view pointer topic of its own (other tests keep version 1 current)."""
    from jobs.config.load import load_config

    with patched_environ({"KAPPA_STREAMING__VIEWS_TOPIC": topic_factory(1, "views")}):
        yield load_config()


@pytest.fixture()
def core_api(monkeypatch) -> Iterator[Any]:
    """Airflow's Core API app on this process's metadata DB (simple auth manager, every user admin)."""
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "True")
    with TestClient(create_app("core")) as client:
        yield client


class Approver(threading.Thread):
    """Answers the first pending request of the ``reprocess`` DAG's ``approve`` task, as a human would."""

    def __init__(self, api, option: str) -> None:
        super().__init__(daemon=True)
        self.api, self.option = api, option
        self.answered: dict[str, Any] | None = None
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                pending = self.api.get(f"{API}/~/hitlDetails", params={"response_received": False})
                details = pending.json().get("hitl_details", []) if pending.status_code == 200 else []
                if pending.status_code != 200:
                    self.errors.append(f"GET hitlDetails {pending.status_code}: {pending.text[:300]}")
                for detail in details:
                    ti = detail["task_instance"]
                    answer = self.api.patch(
                        f"{API}/{ti['dag_run_id']}/taskInstances/{ti['task_id']}/{ti['map_index']}/hitlDetails",
                        json={"chosen_options": [self.option], "params_input": {}})
                    assert answer.status_code == 200, answer.text
                    self.answered = {"subject": detail["subject"], "body": detail["body"],
                                     "dag_run_id": ti["dag_run_id"], **answer.json()}
                    return
            except Exception as exc:  # reported by the test, never swallowed
                self.errors.append(repr(exc))


def _xcom(api, run_id: str, task_id: str) -> Any:
    got = api.get(f"{API}/{run_id}/taskInstances/{task_id}/xcomEntries/return_value",
                  params={"deserialize": True})
    assert got.status_code == 200, got.text
    return got.json()["value"]


def _stop_version(cfg, version: int) -> None:
    from jobs.reprocess.core import job_pid
    from jobs.views.versions import version_config

    _kill_group(job_pid(version_config(cfg, version)))


def test_reprocess_dag_builds_diffs_waits_for_approval_promotes_and_retires(
        airflow_db, views_platform, core_api, redis_client, kafka_props):
    from confluent_kafka.admin import AdminClient

    from jobs.orchestration.streaming import ensure_streaming, running_pid
    from jobs.views.versions import read_views, version_config

    cfg = views_platform
    s, v2 = cfg.streaming, version_config(cfg, 2).streaming
    _produce(cfg, int(time.time() * 1000) - 600_000, EVENTS, 250, seed=36)
    approver = Approver(core_api, "Approve")
    try:
        first = ensure_streaming()["pid"]
        _wait("version 1 applied every event", lambda: _totals(redis_client, cfg).get("input") == EVENTS, 600)
        approver.start()
        state, tasks, took = _run("reprocess", {"version": 2, "max_behind": 0, "grace_minutes": 0})
        approver.stop.set()
        assert approver.errors == [] and approver.answered, approver.errors
        assert state == "success" and set(tasks.values()) == {"success"}, tasks
        assert approver.answered["chosen_options"] == ["Approve"]
        assert approver.answered["subject"] == "Promote view version 2?"
        assert "0 changed" in approver.answered["body"], approver.answered["body"]  # the diff, to the human

        run_id = approver.answered["dag_run_id"]
        counts = _xcom(core_api, run_id, "diff")
        report = json.loads(Path(counts["report"]).read_text())
        assert Path(counts["report"]).parent == Path(cfg.stack.data_dir) / "reprocess"
        assert (counts["keys_changed"], counts["only_in_current"], counts["only_in_version"]) == (0, 0, 0)
        assert counts["keys_equal"] == report["keys_equal"] > 50
        assert report["totals"]["version"]["input"] == EVENTS
        promoted = _xcom(core_api, run_id, "promote")
        assert (promoted["current"], promoted["previous"], promoted["previous_job_stopped"]) == (2, 1, True)
        assert _xcom(core_api, run_id, "approve")["chosen_options"] == ["Approve"]

        views = read_views(cfg)
        assert views.current == 2 and views.state(1) == "retired"
        assert running_pid(cfg) is None, f"version 1's job (pid {first}) still runs"
        assert list(redis_client.scan_iter(match=f"{s.redis_prefix}:*")) == []
        assert int(redis_client.hget(f"{v2.redis_prefix}:totals", "input")) == EVENTS
        present = set(AdminClient(kafka_props).list_topics(timeout=15).topics)
        assert {s.analyzed_topic, s.summaries_topic, s.dlq_topic}.isdisjoint(present)
        assert {v2.analyzed_topic, v2.summaries_topic} <= present
        print(f"reprocess DAG in {took}s: {tasks}; diff {counts}")
    finally:
        approver.stop.set()
        _kill_group(running_pid(cfg))
        _stop_version(cfg, 2)
        delete_topics(AdminClient(kafka_props), [v2.analyzed_topic, v2.summaries_topic, v2.dlq_topic])
        for key in redis_client.scan_iter(match=f"{v2.redis_prefix}:*"):
            redis_client.unlink(key)
