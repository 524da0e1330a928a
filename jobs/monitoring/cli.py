"""``kappa metrics serve`` (the exporter for Prometheus) and ``kappa monitor up | down | status``."""

from __future__ import annotations

import json
import logging
import signal
import threading
from typing import Annotated, Any

import typer

logger = logging.getLogger(__name__)

metrics_app = typer.Typer(no_args_is_help=True, help="Prometheus metrics of every tier (exporter).")


def register(app: typer.Typer) -> None:
    """Attach ``kappa metrics`` and ``kappa monitor`` to the root CLI."""
    app.add_typer(metrics_app, name="metrics")
    app.add_typer(monitor_app, name="monitor")


@metrics_app.command("serve")
def serve(
    host: Annotated[str | None, typer.Option(
        "--host", help="Bind address (default monitoring.host).")] = None,
    port: Annotated[int | None, typer.Option(
        "--port", help="Port (default monitoring.port; 0 = any free).")] = None,
) -> None:
    """Serve /metrics: the streaming job's state, fence and lag read from Redis and Kafka on scrape."""
    from prometheus_client import start_http_server
    from prometheus_client.registry import CollectorRegistry

    from jobs.config.load import load_config
    from jobs.monitoring.exporter import KappaCollector

    cfg = load_config()
    bind_host, bind_port = host or cfg.monitoring.host, cfg.monitoring.port if port is None else port
    registry = CollectorRegistry()
    collector = KappaCollector(cfg)
    registry.register(collector)  # type: ignore[arg-type]
    try:
        server, _ = start_http_server(bind_port, addr=bind_host, registry=registry)
    except (OSError, OverflowError) as exc:
        typer.echo(f"error: cannot listen on {bind_host}:{bind_port} ({exc}); pick another --port", err=True)
        raise typer.Exit(2) from None
    bound_host, bound_port = server.server_address[:2]
    where = f"http://{bound_host!s}:{bound_port}/metrics"
    typer.echo(f"metrics exporter on {where} (Ctrl-C stops)", err=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        collector.close()


monitor_app = typer.Typer(no_args_is_help=True,
                          help="Prometheus and Alertmanager on this machine with the shipped rules.")
JSON = typer.Option(False, "--json", help="Print machine-readable JSON.")


def _print_status(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    for name in ("prometheus", "alertmanager"):
        row = report[name]
        where = f"pid {row['pid']} at {row['url']}" if row["running"] else "not running (kappa monitor up)"
        typer.echo(f"{name:13} {where}")
    if report.get("firing") is not None:
        typer.echo(f"firing       {', '.join(report['firing']) or 'none'}")
    typer.echo(f"data, logs   {report['root']}")


@monitor_app.command("up")
def monitor_up(as_json: bool = JSON) -> None:
    """Start Prometheus and Alertmanager on free loopback ports; print where to look."""
    from jobs.config.load import load_config
    from jobs.monitoring.local import up

    report = up(load_config(), progress=lambda line: typer.echo(f".. {line}", err=True))
    _print_status(report, as_json)
    if not as_json:
        typer.echo("alerts: <prometheus>/alerts; exporter: kappa metrics serve (docs/runbooks/monitoring.md)")


@monitor_app.command("down")
def monitor_down(as_json: bool = JSON) -> None:
    """Stop the Prometheus and Alertmanager that `kappa monitor up` started (data stays)."""
    from jobs.config.load import load_config
    from jobs.monitoring.local import down

    stopped = down(load_config(), progress=lambda line: typer.echo(f".. {line}", err=True))
    typer.echo(json.dumps({"stopped": stopped}) if as_json else f"stopped: {', '.join(stopped) or 'nothing'}")


@monitor_app.command("status")
def monitor_status(as_json: bool = JSON) -> None:
    """Whether local Prometheus and Alertmanager run, where, and which alerts fire."""
    from jobs.config.load import load_config
    from jobs.monitoring.local import status

    _print_status(status(load_config()), as_json)
