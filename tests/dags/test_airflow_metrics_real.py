"""The exporter reads a real local Airflow (`kappa airflow up`): scheduler health and failed tasks.

A run of `replay` whose source topic does not exist fails its pre-flight at once, without
retries (dags/replay.py): one failed task instance, which the exporter counts under its DAG.
Slow: Airflow starts in 20-40 s on two cores.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from tests.dags import airflow_support as af

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

INSTANCE_ENV = {"KAPPA_AIRFLOW__PORT": "0", "KAPPA_AIRFLOW__START_TIMEOUT_S": "300",
                "KAPPA_STREAMING__SOURCE_TOPIC": f"missing.{uuid.uuid4().hex[:8]}"}


def _ended(api: httpx.Client, run_id: str) -> dict | None:
    """The run once it ended (None meanwhile, also when the API is too slow to answer under load)."""
    try:
        run = api.get(f"/api/v2/dags/replay/dagRuns/{run_id}").json()
    except httpx.TimeoutException:
        return None
    return run if run["state"] in ("success", "failed") else None


def _scrape(cfg) -> dict | None:
    """One scrape of a new exporter; None when Airflow did not answer it in time (a loaded machine)."""
    from jobs.monitoring.exporter import KappaCollector

    registry = CollectorRegistry()
    collector = KappaCollector(cfg)
    registry.register(collector)
    try:
        got = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(generate_latest(registry).decode())
               for s in family.samples}
    finally:
        collector.close()
    return got if got.get(("kappa_exporter_source_up", (("source", "airflow"),))) == 1 else None


def test_failed_task_instances_and_scheduler_heartbeat(stack, run_kappa):
    up = run_kappa("airflow", "up", env=INSTANCE_ENV, timeout=600)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        status = json.loads(run_kappa("airflow", "status", "--json", env=INSTANCE_ENV).stdout)
        token = httpx.post(f"{status['url']}/auth/token", timeout=30,
                           json={"username": status["user"], "password": status["password"]})
        api = httpx.Client(base_url=status["url"], timeout=60,
                           headers={"Authorization": f"Bearer {token.json()['access_token']}"})
        af.wait_for("the replay DAG parsed", lambda: api.get("/api/v2/dags/replay").status_code == 200, 300)
        assert api.patch("/api/v2/dags/replay", json={"is_paused": False}).status_code == 200
        created = api.post("/api/v2/dags/replay/dagRuns", json={"logical_date": "2026-01-01T00:00:00Z"})
        assert created.status_code in (200, 201), created.text
        run_id = created.json()["dag_run_id"]
        run = af.wait_for("the replay run ended", lambda: _ended(api, run_id), timeout_s=600, poll_s=5)
        assert run["state"] == "failed", run
        cfg = stack.model_copy(update={"monitoring": stack.monitoring.model_copy(
            update={"airflow_url": status["url"]}), "airflow": stack.airflow.model_copy(
            update={"home": Path(status["home"])})})
        got = af.wait_for("the exporter read Airflow", lambda: _scrape(cfg), timeout_s=120, poll_s=5)
        scraped_at = time.time()
        api.close()
    finally:
        down = run_kappa("airflow", "down", env=INSTANCE_ENV, timeout=180)
        assert down.returncode == 0, down.stdout + down.stderr
    assert got[("kappa_exporter_source_up", (("source", "airflow"),))] == 1
    assert got[("kappa_airflow_failed_task_instances", (("dag_id", "replay"),))] == 1
    assert got[("kappa_airflow_scheduler_up", ())] == 1
    assert scraped_at - 120 < got[("kappa_airflow_scheduler_heartbeat_timestamp_seconds", ())] <= scraped_at
