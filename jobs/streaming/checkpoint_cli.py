"""``kappa stream checkpoint inspect | rebuild | reset`` (docs/runbooks/checkpoint.md)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from jobs.config.load import KappaConfig, load_config
from jobs.errors import ConfigError
from jobs.pipelines.cli import PIPELINE_OPTION, engine_pipeline

checkpoint_app = typer.Typer(no_args_is_help=True, help=(
    "Inspect a query's checkpoint; rebuild it from the sink's offsets or reset it to a time."))

QUERY = typer.Option("--query", help="Query name (default streaming.query_name).")
EXECUTE = typer.Option("--execute", help="Do it (default: print the plan only).")
JSON_OPTION = typer.Option("--json", help="Print machine-readable JSON.")


def _config(pipeline: str | None) -> KappaConfig:
    """The config of the kappa-stream pipeline named (default: the configured one); refuse another."""
    on_engine = engine_pipeline(pipeline)
    if on_engine is not None:
        raise ConfigError(f"pipeline {on_engine} runs on the engine, whose checkpoint is rebuilt from the "
                          f"log: `kappa pipelines reprocess {on_engine}` builds a new view version from "
                          "any offset (docs/runbooks/pipelines.md)")
    return load_config()


def _say(message: str) -> None:
    typer.echo(f".. {message}", err=True)


def _show(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(data))
        return
    for key, value in data.items():
        if key == "partitions":
            typer.echo("partitions:")
            for part in value:
                typer.echo("  " + ", ".join(f"{k}={v}" for k, v in part.items()))
        else:
            typer.echo(f"{key}: {value}")


@checkpoint_app.command("inspect")
def inspect(query: Annotated[str | None, QUERY] = None,
            as_json: Annotated[bool, JSON_OPTION] = False,
            pipeline: Annotated[str | None, PIPELINE_OPTION] = None) -> None:
    """Last committed batch and offsets against Kafka's earliest/latest and the Redis fence."""
    from jobs.streaming import checkpoint

    _show(checkpoint.inspect(_config(pipeline), query), as_json)


@checkpoint_app.command("rebuild")
def rebuild(query: Annotated[str | None, QUERY] = None, execute: Annotated[bool, EXECUTE] = False,
            as_json: Annotated[bool, JSON_OPTION] = False,
            pipeline: Annotated[str | None, PIPELINE_OPTION] = None) -> None:
    """New checkpoint starting at the offsets the Redis summaries recorded (their fence)."""
    from jobs.streaming import checkpoint

    _show(checkpoint.rebuild(_config(pipeline), query, execute=execute, progress=_say), as_json)


@checkpoint_app.command("reset")
def reset(to: Annotated[str, typer.Option("--to", help="ISO timestamp with zone, or epoch ms.")],
          query: Annotated[str | None, QUERY] = None, execute: Annotated[bool, EXECUTE] = False,
          as_json: Annotated[bool, JSON_OPTION] = False,
          pipeline: Annotated[str | None, PIPELINE_OPTION] = None) -> None:
    """New checkpoint starting at the first record at or after a time in each partition."""
    from jobs.streaming import checkpoint

    _show(checkpoint.reset(_config(pipeline), query, to, execute=execute, progress=_say), as_json)
