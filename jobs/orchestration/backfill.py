"""``kappa airflow backfill``: Airflow's own backfill of a DAG on the local Airflow, via its REST API.

Airflow creates a backfill of a paused DAG but never starts its runs: they stay queued, and
nothing says why. This command refuses a paused DAG with that reason (``--unpause`` unpauses
it first: harmless for ``replay``, whose scheduled runs write nothing), plans the runs with
Airflow's dry run and then creates the backfill. ``--from``/``--to`` are logical dates, both
included, as in ``airflow backfill create``: for ``replay`` (hourly intervals named by their
start) ``--from 10:00 --to 11:00`` replays [10:00, 12:00).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from jobs.common.config import KappaConfig
from jobs.common.errors import ConfigError, KappaError, StackError


class DagPaused(ConfigError):
    """The DAG of a backfill is paused, so Airflow would never start the backfill's runs."""


def parse_logical_date(text: str, option: str) -> datetime:
    """An ISO 8601 time with a zone (``2026-11-26T10:00:00Z``) or epoch ms; ConfigError otherwise."""
    from jobs.streaming.cli import parse_bound  # the same time formats as `kappa stream run --from`

    value = parse_bound(text, option)
    if not isinstance(value, datetime):
        raise ConfigError(f"{option} {text!r}: expected a logical date, an ISO 8601 time with zone "
                          "such as 2026-11-26T10:00:00Z")
    return value


def submit_backfill(cfg: KappaConfig, dag_id: str, start: datetime, end: datetime, *, unpause: bool,
                    progress: Callable[[str], None]) -> dict[str, Any]:
    """Check the DAG, plan and create the backfill; return its id and planned logical dates."""
    if end < start:
        raise ConfigError(f"--to {end.isoformat()} is before --from {start.isoformat()}")
    client = _client(cfg)
    try:
        dag = client.get(f"/api/v2/dags/{dag_id}")
        if dag.status_code == 404:
            raise ConfigError(f"no DAG {dag_id!r} in the local Airflow (`kappa airflow status`, UI)")
        _check(dag, "read the DAG")
        if dag.json()["is_paused"]:
            if not unpause:
                harmless = " - harmless for replay: its scheduled runs write nothing" * (dag_id == "replay")
                raise DagPaused(
                    f"DAG {dag_id} is paused: Airflow would create the backfill but never start its "
                    f"runs (they stay queued, with no message); unpause it first (UI, or rerun with "
                    f"--unpause){harmless}")
            _check(client.patch(f"/api/v2/dags/{dag_id}", json={"is_paused": False}), "unpause the DAG")
            progress(f"{dag_id}: unpaused")
        body = {"dag_id": dag_id, "from_date": start.isoformat(), "to_date": end.isoformat(),
                "max_active_runs": 1, "reprocess_behavior": "completed", "run_backwards": False}
        planned = client.post("/api/v2/backfills/dry_run", json=body)
        _check(planned, "plan the backfill")
        dates = [run["logical_date"] for run in planned.json().get("backfills", [])]
        if not dates:
            raise ConfigError(f"no run of {dag_id} has a logical date in [{start.isoformat()}, "
                              f"{end.isoformat()}] (or every one already succeeded)")
        progress(f"{dag_id}: {len(dates)} runs planned, {dates[0]} .. {dates[-1]}")
        created = client.post("/api/v2/backfills", json=body)
        _check(created, "create the backfill")
    finally:
        client.close()
    backfill = created.json()
    return {"dag_id": dag_id, "backfill_id": backfill["id"], "runs": dates,
            "status": f"GET /api/v2/backfills/{backfill['id']}"}


def _client(cfg: KappaConfig):
    import httpx

    from jobs.orchestration.local import LocalAirflow

    status = LocalAirflow(cfg).status()
    if not status.healthy or not status.url or not status.password:
        raise StackError("the local Airflow does not run (or is not healthy yet): `kappa airflow up`, "
                         "then `kappa airflow status`")
    token = httpx.post(f"{status.url}/auth/token", timeout=30,
                       json={"username": status.user, "password": status.password})
    _check(token, "log in")
    return httpx.Client(base_url=status.url, timeout=60,
                        headers={"Authorization": f"Bearer {token.json()['access_token']}"})


def _check(response, what: str) -> None:
    if response.status_code not in (200, 201):
        raise KappaError(f"Airflow refused to {what}: HTTP {response.status_code} {response.text[:300]}")
