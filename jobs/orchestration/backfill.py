"""``kappa airflow backfill``: Airflow's own backfill of a DAG on the local Airflow, via its REST API.

Airflow creates a backfill of a paused DAG but never starts its runs: they stay queued, and
nothing says why. This command refuses a paused DAG with that reason (``--unpause`` unpauses
it first: harmless for ``replay``, of which the scheduler makes no run), plans the runs with
Airflow's dry run and then creates the backfill. ``--from``/``--to`` are logical dates, both
included, as in ``airflow backfill create``: for ``replay`` (hourly intervals named by their
start) ``--from 10:00 --to 11:00`` replays [10:00, 12:00). ``--conf`` is the runs' configuration
(the DAG's params, e.g. ``{"sinks": ["kafka", "redis"]}``), as the UI's backfill form sends it;
``--wait`` follows the runs until the backfill completes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from jobs.config.load import KappaConfig
from jobs.errors import ConfigError, KappaError, StackError

EXAMPLE = """'{"sinks": ["kafka", "redis"]}'"""


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


def parse_conf(text: str | None) -> dict[str, Any] | None:
    """``--conf``: a JSON object (the runs' params), or None; ConfigError naming what is wrong."""
    if text is None:
        return None
    try:
        conf = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--conf {text!r} is not JSON ({exc.msg} at character {exc.pos}); give an "
                          "object of the DAG's params, e.g. --conf " + EXAMPLE) from None
    if not isinstance(conf, dict):
        raise ConfigError(f"--conf {text!r}: expected a JSON object of the DAG's params, e.g. {EXAMPLE}")
    return conf


def submit_backfill(cfg: KappaConfig, dag_id: str, start: datetime, end: datetime, *, unpause: bool,
                    progress: Callable[[str], None], conf: dict[str, Any] | None = None) -> dict[str, Any]:
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
                harmless = " - harmless for replay: the scheduler makes no run of it" * (dag_id == "replay")
                raise DagPaused(
                    f"DAG {dag_id} is paused: Airflow would create the backfill but never start its "
                    f"runs (they stay queued, with no message); unpause it first (UI, or rerun with "
                    f"--unpause){harmless}")
            _check(client.patch(f"/api/v2/dags/{dag_id}", json={"is_paused": False}), "unpause the DAG")
            progress(f"{dag_id}: unpaused")
        body = {"dag_id": dag_id, "from_date": start.isoformat(), "to_date": end.isoformat(),
                "max_active_runs": 1, "reprocess_behavior": "completed", "run_backwards": False}
        if conf:
            body["dag_run_conf"] = conf
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


def wait_backfill(cfg: KappaConfig, report: dict[str, Any], progress: Callable[[str], None],
                  poll_s: float = 2.0) -> list[dict[str, Any]]:
    """Follow a backfill's runs until Airflow marks it completed; each run's state and duration."""
    dag_id, dates = report["dag_id"], set(report["runs"])
    client = _client(cfg)
    said: dict[str, str] = {}
    try:
        while True:
            backfill = client.get(f"/api/v2/backfills/{report['backfill_id']}")
            _check(backfill, "read the backfill")
            listed = client.get(f"/api/v2/dags/{dag_id}/dagRuns",
                                params={"run_type": "backfill", "limit": 1000, "order_by": "logical_date"})
            _check(listed, "list the backfill's runs")
            runs = [_run(run) for run in listed.json()["dag_runs"] if run["logical_date"] in dates]
            for run in runs:
                if said.get(run["logical_date"]) != run["state"]:
                    said[run["logical_date"]] = run["state"]
                    took = f" in {run['duration_s']} s" if run["duration_s"] is not None else ""
                    progress(f"{dag_id} {run['logical_date']}: {run['state']}{took}")
            if backfill.json().get("completed_at"):
                return runs
            time.sleep(poll_s)
    finally:
        client.close()


def _run(run: dict[str, Any]) -> dict[str, Any]:
    started, ended = run.get("start_date"), run.get("end_date")
    duration = (round((datetime.fromisoformat(ended) - datetime.fromisoformat(started)).total_seconds(), 2)
                if started and ended else None)
    return {"logical_date": run["logical_date"], "run_id": run["dag_run_id"], "state": run["state"],
            "duration_s": duration}


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
