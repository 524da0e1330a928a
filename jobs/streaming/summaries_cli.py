"""``kappa summaries [VIEW [KEY]]``: a pipeline's live views, read from Redis."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from jobs.config.load import load_config
from jobs.errors import ConfigError
from jobs.pipelines.cli import PIPELINE_OPTION, engine_pipeline

JSON_OPTION = typer.Option("--json", help="Print machine-readable JSON.")


def summaries(view: Annotated[str | None, typer.Argument(help="The view (none: list the views).")] = None,
              key: Annotated[str | None, typer.Argument(help="The key, for a view of one entity.")] = None,
              *,
              windows: Annotated[int, typer.Option("--windows", help="How many latest windows.")] = 1,
              n: Annotated[int | None, typer.Option("-n", help="How many items (default: the view's).")
                           ] = None,
              as_json: Annotated[bool, JSON_OPTION] = False,
              pipeline: Annotated[str | None, PIPELINE_OPTION] = None) -> None:
    """Read a live view of a pipeline from Redis (its current view version).

    The views of a kappa-stream pipeline are its ``summaries:`` file's: `kappa summaries` lists
    them. A pipeline on the engine is read as `kappa pipelines view NAME VIEW --key KEY` reads it.
    """
    from jobs.pipelines.cli import pipeline_hook

    on_engine = engine_pipeline(pipeline)
    if on_engine is not None:
        from jobs.pipelines import cli_run
        from jobs.pipelines.cli import pipeline_spec

        if view is None:
            views = pipeline_spec(on_engine).views
            _print(sorted(views), as_json,
                   lambda: [f"{name:<20} {decl.kind}" for name, decl in views.items()])
            return
        cli_run.view(on_engine, view_name=view, key=key, window=None, prefix=None, version=None)
        return
    spec, read = pipeline_hook(pipeline, "summaries")
    if read is None:
        raise ConfigError(f"pipeline {spec.name} names no `summaries:` file in its pipeline.yaml; read "
                          f"its views with `kappa pipelines view {spec.name} VIEW`")
    data, lines = read(_current() if view is not None else load_config(), view, key, windows, n)
    _print(data, as_json, lambda: lines)


def _current():
    """The config of the current view version (the summaries a reader sees: docs/reprocess.md).

    A view whose Redis data is gone is an error, never shown as current (docs/runbooks/redis-lost.md).
    """
    from jobs.streaming.summaries import check_view_kept
    from jobs.views.versions import current_config

    cfg = current_config(load_config())
    check_view_kept(cfg)
    return cfg


def _print(data: Any, as_json: bool, lines) -> None:
    if as_json:
        typer.echo(json.dumps(data))
        return
    for line in lines() or ["(nothing yet: is the streaming job running? `kappa stream status`)"]:
        typer.echo(line)


