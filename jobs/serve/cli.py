"""CLI commands of jobs/serve: ``kappa serve`` (attached to ``kappa`` by :func:`register`)."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from jobs.config.load import load_config
from jobs.errors import ConfigError


def register(app: typer.Typer) -> None:
    """Attach ``kappa serve`` to the root CLI."""
    app.command("serve")(serve)


def serve(
    host: Annotated[str | None, typer.Option("--host", help="Bind address (default serve.host).")] = None,
    port: Annotated[int | None, typer.Option(
        "--port", help="Port (default serve.port; 0 = any free).")] = None,
) -> None:
    """Serve live summaries (REST), SSE/WebSocket streams and the dashboard (docs/api.md)."""
    from jobs.serve.server import run
    from jobs.serve.service import auth_token, check_limits

    cfg = load_config()
    if port is not None and not 0 <= port <= 65535:
        raise ConfigError(f"--port must be between 0 and 65535, got {port}")
    token = auth_token(cfg)
    check_limits(cfg)
    bind_host, bind_port = host or cfg.serve.host, cfg.serve.port if port is None else port
    level = logging.getLogger().getEffectiveLevel()
    typer.echo(f".. kappa serve on http://{bind_host}:{bind_port} (dashboard at /, API at /docs, "
               f"auth {'on' if token else 'off'})", err=True)
    run(cfg, token, bind_host, bind_port, "info" if level <= logging.INFO else "warning")
