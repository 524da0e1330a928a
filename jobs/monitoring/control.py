"""Metrics of the control plane: view versions and reprocess progress, Airflow's scheduler and tasks."""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import UTC, datetime
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from jobs.config.load import KappaConfig

VIEW_STATES = ("building", "current", "previous", "retired")
HEALTH_PATH = "/api/v2/monitor/health"
TASKS_PATH = "/api/v2/dags/~/dagRuns/~/taskInstances"
FAILED_WINDOW_S = 86_400  # failed task instances that ended within this window count
PAGE = 100
TIMEOUT_S = 5.0


def views_metrics(cfg: KappaConfig, redis_client: Any) -> list[Metric]:
    """The current view version, each live version's state and records behind (reprocess progress)."""
    from jobs.views.versions import read_views, version_config

    views = read_views(cfg)
    current = GaugeMetricFamily("kappa_views_current_version", "The view version readers follow")
    current.add_metric([], views.current)
    state = GaugeMetricFamily("kappa_view_version_state", "1 for each live view version's state",
                              labels=["version", "state"])
    behind = GaugeMetricFamily("kappa_view_offsets_behind_latest",
                               "Records the version's job was behind the latest offsets after its last batch",
                               labels=["version"])
    for version in views.live():
        for name in VIEW_STATES:
            state.add_metric([str(version), name], int(views.state(version) == name))
        streaming = version_config(cfg, version).streaming
        value = redis_client.hget(f"{streaming.redis_prefix}:metrics:{streaming.query_name}",
                                  "offsets_behind_latest")
        if value not in (None, "", "None", "null"):
            behind.add_metric([str(version)], float(value))
    return [current, state, behind]


def airflow_metrics(url: str) -> list[Metric]:
    """Airflow's own health endpoint: scheduler status and heartbeat (an unreachable API is down)."""
    up = GaugeMetricFamily("kappa_airflow_scheduler_up", "1 when Airflow's health endpoint says the "
                           "scheduler is healthy")
    heartbeat = GaugeMetricFamily("kappa_airflow_scheduler_heartbeat_timestamp_seconds",
                                  "The scheduler's latest heartbeat (Unix time)")
    try:
        with urllib.request.urlopen(url.rstrip("/") + HEALTH_PATH, timeout=TIMEOUT_S) as response:
            scheduler = json.loads(response.read()).get("scheduler", {})
    except (OSError, ValueError):
        up.add_metric([], 0)
        return [up, heartbeat]
    up.add_metric([], int(scheduler.get("status") == "healthy"))
    beat = scheduler.get("latest_scheduler_heartbeat")
    if beat:
        heartbeat.add_metric([], datetime.fromisoformat(beat).timestamp())
    return [up, heartbeat]


def airflow_failed_tasks(url: str, user: str, password: str) -> list[Metric]:
    """Per DAG, task instances failed in the last :data:`FAILED_WINDOW_S`, from Airflow's REST API.

    Logs in as ``user`` (``POST /auth/token``) and pages through the failed task instances whose
    end date falls in the window. A DAG with none has no sample.
    """
    import httpx

    failed = GaugeMetricFamily("kappa_airflow_failed_task_instances", "Task instances now in state failed "
                               f"that ended in the last {FAILED_WINDOW_S // 3600} h", labels=["dag_id"])
    base = url.rstrip("/")
    login = httpx.post(f"{base}/auth/token", json={"username": user, "password": password}, timeout=TIMEOUT_S)
    login.raise_for_status()
    since = datetime.fromtimestamp(time.time() - FAILED_WINDOW_S, UTC).isoformat()
    counts: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {login.json()['access_token']}"}
    with httpx.Client(base_url=base, timeout=TIMEOUT_S, headers=headers) as client:
        offset, total = 0, 1
        while offset < total:
            page = client.get(TASKS_PATH, params={"state": "failed", "end_date_gte": since, "limit": PAGE,
                                                  "offset": offset})
            page.raise_for_status()
            body = page.json()
            rows, total = body["task_instances"], int(body["total_entries"])
            if not rows:
                break
            for row in rows:
                counts[row["dag_id"]] = counts.get(row["dag_id"], 0) + 1
            offset += len(rows)
    for dag_id, count in sorted(counts.items()):
        failed.add_metric([dag_id], count)
    return [failed]


def local_airflow_login(cfg: KappaConfig) -> tuple[str, str]:
    """The admin login of the local Airflow (``kappa airflow up``): its user and generated password."""
    from jobs.orchestration.local import LocalAirflow

    password = LocalAirflow(cfg).password()
    if password is None:
        raise RuntimeError("no Airflow password: the exporter logs in to the local Airflow of "
                           "`kappa airflow up` only (its generated admin password file is missing)")
    return cfg.airflow.admin_user, password
