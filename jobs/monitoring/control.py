"""Metrics of the control plane: view versions and reprocess progress, Airflow's scheduler."""

from __future__ import annotations

import json
import urllib.request
from datetime import datetime
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from jobs.common.config import KappaConfig

VIEW_STATES = ("building", "current", "previous", "retired")
HEALTH_PATH = "/api/v2/monitor/health"
TIMEOUT_S = 5.0


def views_metrics(cfg: KappaConfig, redis_client: Any) -> list[Metric]:
    """The current view version, each live version's state and records behind (reprocess progress)."""
    from jobs.common.views import read_views, version_config

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
