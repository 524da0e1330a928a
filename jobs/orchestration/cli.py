"""CLI commands of jobs/orchestration (attached to `kappa` by :func:`register`).

``kappa airflow up | down | status | backfill``: the local Airflow 3 that runs the project's
DAGs (docs/runbooks/airflow.md).
"""

from __future__ import annotations

import json
from dataclasses import asdict

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console()
err_console = Console(stderr=True)

airflow_app = typer.Typer(no_args_is_help=True,
                          help="Run a local Airflow 3 with the project's DAGs (wired to the stack).")


def _progress(message: str) -> None:
    err_console.print(f"[dim]..[/dim] {escape(message)}", highlight=False, soft_wrap=True)


def _local():
    from jobs.config.load import load_config
    from jobs.orchestration.local import LocalAirflow

    return LocalAirflow(load_config())


@airflow_app.command("up")
def airflow_up() -> None:
    """Start api-server, scheduler, dag-processor and triggerer; wait for health; print the login."""
    status = _local().up(progress=_progress)
    _print(status, as_json=False)
    console.print(f"UI: {status.url}  login: {status.user} / {status.password}", highlight=False,
                  soft_wrap=True)


@airflow_app.command("down")
def airflow_down() -> None:
    """Stop every Airflow process `up` started (process groups; SIGKILL after a grace period)."""
    _local().down(progress=_progress)


@airflow_app.command("status")
def airflow_status(
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Show each component's pid and health, the UI address and login; exit 1 if not healthy."""
    status = _local().status()
    _print(status, as_json)
    if not status.healthy:
        raise typer.Exit(1)


@airflow_app.command("backfill")
def airflow_backfill(
    dag_id: str = typer.Argument("replay", help="The DAG to backfill (default replay)."),
    *,
    from_: str = typer.Option(..., "--from", help="First logical date, ISO 8601 with zone."),
    to: str = typer.Option(..., "--to", help="Last logical date (included), ISO 8601 with zone."),
    unpause: bool = typer.Option(False, "--unpause", help="Unpause a paused DAG first."),
    conf: str | None = typer.Option(None, "--conf", help='The runs\' configuration (the DAG\'s params) '
                                    'as a JSON object, e.g. \'{"sinks": ["kafka", "redis"]}\'.'),
    wait: bool = typer.Option(False, "--wait", help="Follow the runs until the backfill completes; "
                              "exit 1 if one failed."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Airflow's backfill of a DAG on the local Airflow; refuses a paused DAG (its runs would never start)."""
    from jobs.config.load import load_config
    from jobs.orchestration.backfill import parse_conf, parse_logical_date, submit_backfill, wait_backfill

    start, end = parse_logical_date(from_, "--from"), parse_logical_date(to, "--to")
    params = parse_conf(conf)
    cfg = load_config()
    report = submit_backfill(cfg, dag_id, start, end, unpause=unpause, progress=_progress, conf=params)
    if wait:
        report["runs"] = wait_backfill(cfg, report, _progress)
    failed = [run for run in report["runs"] if isinstance(run, dict) and run["state"] != "success"]
    if as_json:
        console.print_json(json.dumps(report))
    elif wait:
        console.print(f"backfill {report['backfill_id']} of {dag_id}: {len(report['runs']) - len(failed)} "
                      f"of {len(report['runs'])} runs succeeded", highlight=False, soft_wrap=True)
    else:
        console.print(f"backfill {report['backfill_id']} of {dag_id}: {len(report['runs'])} runs; "
                      f"status: {report['status']}", highlight=False, soft_wrap=True)
    if failed:
        err_console.print(f"error: {len(failed)} run(s) of the backfill did not succeed (first: "
                          f"{failed[0]['logical_date']} {failed[0]['state']}); see its task log in the UI "
                          "and docs/runbooks/airflow.md", highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _print(status, as_json: bool) -> None:
    if as_json:
        console.print_json(json.dumps(asdict(status)))
        return
    table = Table("component", "pid", "health")
    for row in status.components:
        colour = "green" if row.health == "healthy" and row.pid else "red"
        table.add_row(row.name, str(row.pid or "-"), f"[{colour}]{row.health}[/{colour}]")
    console.print(table)
    console.print(f"url {status.url or '-'}  home {status.home}  database {status.database or '-'}",
                  highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Attach ``kappa airflow`` to the root CLI."""
    app.add_typer(airflow_app, name="airflow")
