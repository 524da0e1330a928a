"""``kappa spark up|down|status``: the local Spark service that replays, loads and batch jobs attach to."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from typing import Annotated

import typer

from jobs.config.load import PROJECT_ROOT, load_config
from jobs.errors import KappaError

spark_app = typer.Typer(no_args_is_help=True, help=(
    "A local Spark kept up for replays, backfills and loads (docs/runbooks/spark.md)."))
JSON_OPTION = typer.Option("--json", help="Print machine-readable JSON.")
START_TIMEOUT_S = 180.0


def register(app: typer.Typer) -> None:
    """Attach ``kappa spark``."""
    app.add_typer(spark_app, name="spark")


def progress(message: str) -> None:
    """A progress line on stderr."""
    typer.echo(f".. {message}", err=True)


@spark_app.command("up")
def up(port: Annotated[int, typer.Option("--port", help="Loopback port (0: a free one).")] = 0,
       timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds to wait for it.")
                            ] = START_TIMEOUT_S) -> None:
    """Start the Spark service in the background and wait until it answers."""
    from jobs.spark.attach import choose
    from jobs.spark.service_state import MODULE, log_path, read_state

    cfg = load_config()
    state = read_state(cfg)
    if state is not None:
        typer.echo(f"spark: already up, pid {state.pid} on 127.0.0.1:{state.port}")
        return
    log = log_path(cfg)
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", MODULE, "--port", str(port)]
    if cfg.spark.service_nice and shutil.which("nice"):  # the JVM and its workers inherit it
        command = ["nice", "-n", str(cfg.spark.service_nice), *command]
    with log.open("ab") as out:
        process = subprocess.Popen(command,
                                   stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   cwd=PROJECT_ROOT, process_group=0)
    progress(f"spark: starting pid {process.pid} (log {log})")
    deadline = time.monotonic() + timeout_s
    while read_state(cfg) is None or read_state(cfg).pid != process.pid:  # type: ignore[union-attr]
        if process.poll() is not None:
            raise KappaError(f"the Spark service exited during start (code {process.returncode}); "
                             f"see {log}")
        if time.monotonic() > deadline:
            process.terminate()
            raise KappaError(f"the Spark service did not start within {timeout_s:.0f} s; see {log}")
        time.sleep(0.2)
    typer.echo(f"spark: up, {choose(cfg).reason}")


@spark_app.command("down")
def down(grace_s: Annotated[float, typer.Option("--grace", help="Seconds before SIGKILL.")] = 60.0) -> None:
    """Stop the Spark service (a job it runs stops at a consistent point first)."""
    from jobs.host.processes import registered, stop_registered
    from jobs.spark.service_state import NAME

    cfg = load_config()
    if not any(item.name == NAME for item in registered(cfg)):
        typer.echo("spark: not running (nothing registered)")
        return
    stop_registered(cfg, grace_s=grace_s, progress=progress, names=(NAME,))


@spark_app.command("status")
def status(as_json: Annotated[bool, JSON_OPTION] = False) -> None:
    """Whether replays, loads and batch jobs attach to a Spark service, and why; exit 1 if not."""
    from jobs.spark.attach import choose

    choice = choose(load_config())
    if as_json:
        typer.echo(json.dumps({"attach": choice.attach, "reason": choice.reason, "service": choice.info}))
    else:
        typer.echo(f"spark: {'service' if choice.attach else 'cold'}: {choice.reason}")
        if choice.info and choice.info.get("nice_note"):
            typer.echo(f"spark: note: {choice.info['nice_note']}")
    if not choice.attach:
        raise typer.Exit(1)
