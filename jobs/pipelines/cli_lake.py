"""``kappa pipelines load | gold | reconcile``: a pipeline's lake tables (jobs/engine/lake/)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from jobs.errors import ConfigError
from jobs.pipelines.cli import JSON_OPTION, _version, pipelines_app

NAME_ARGUMENT = typer.Argument(help="The pipeline's name.")
TABLES_OPTION = typer.Option("--tables", help="Comma-separated tables (default: all of the pipeline's).")
MAX_LISTED = 20
OWN_LAKE = {"load": "kappa load", "gold": "kappa batch run", "reconcile": "kappa batch reconcile"}
"""What serves a pipeline whose streaming job is ``kappa stream`` (its own lake tier)."""


def _pipeline(name: str, command: str) -> Any:
    """The loaded pipeline, with its spec and code (ConfigError naming the first problem otherwise)."""
    from jobs.pipelines.registry import resolve

    item = resolve(name)
    assert item.spec is not None
    if item.spec.streaming.job == "kappa-stream":
        raise ConfigError(f"pipeline {name} runs its own streaming job (kappa stream) and lake tier: use "
                          f"`{OWN_LAKE[command]}` (docs/tables.md)")
    return item


def _names(tables: str | None) -> list[str] | None:
    return [part.strip() for part in tables.split(",") if part.strip()] if tables else None


@pipelines_app.command("load")
def load(
    name: Annotated[str, NAME_ARGUMENT],
    tables: Annotated[str | None, TABLES_OPTION] = None,
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Load the pipeline's topic-fed tables up to the latest offsets, exactly once (one commit per table)."""
    from jobs.config.load import load_config
    from jobs.engine.lake.tables import load_targets
    from jobs.loader.attach import run_load
    from jobs.loader.cli import echo_results, progress
    from jobs.loader.offsets import parse_until

    item, cfg = _pipeline(name, "load"), load_config()
    chosen = load_targets(cfg, item.spec, item.code, _names(tables))
    results = run_load(cfg, chosen, parse_until(None), progress, app_name=f"kappa-loader-{name}")
    echo_results(results, as_json, width=32)


@pipelines_app.command("gold")
def gold(
    name: Annotated[str, NAME_ARGUMENT],
    *,
    dates: Annotated[list[str] | None, typer.Option("--date", help="A date (YYYY-MM-DD) to recompute "
                                                                   "(repeatable).")] = None,
    start: Annotated[str | None, typer.Option("--from", help="First date, inclusive (with --to).")] = None,
    end: Annotated[str | None, typer.Option("--to", help="End date, exclusive (with --from).")] = None,
    tables: Annotated[str | None, TABLES_OPTION] = None,
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Replace the dates' partitions of each gold table with its gold transform over silver."""
    from jobs.batch.cli import echo_reports
    from jobs.batch.run import batch_spark, date_range, parse_date
    from jobs.config.load import load_config
    from jobs.engine.lake.gold import gold_jobs, run_gold
    from jobs.loader.cli import progress

    if (start is None) != (end is None) or (start is None and not dates):
        raise ConfigError("give the dates: --date YYYY-MM-DD (repeatable) and/or --from and --to")
    days = [parse_date(text, "--date") for text in dates or []]
    if start is not None:
        days += date_range(parse_date(start, "--from"), parse_date(str(end), "--to"))
    item, cfg = _pipeline(name, "gold"), load_config()
    gold_jobs(item.spec, item.code, _names(tables))  # a bad table or transform fails before Spark starts
    reports = run_gold(batch_spark(cfg), cfg, item.spec, item.code, dates=days, tables=_names(tables),
                       progress=progress)
    echo_reports(reports, as_json, widths=(40, 32))


@pipelines_app.command("reconcile")
def reconcile(
    name: Annotated[str, NAME_ARGUMENT],
    prefix: Annotated[str | None, typer.Option("--prefix", help="Redis prefix of the views (default: the "
                                                                "current view version's).")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the report as JSON, with every difference, also on a drift (exit 6).")] = False,
) -> None:
    """Compare the views named in `reconcile:` with their lake queries over silver; exit 6 on a difference."""
    from jobs.batch.report import ViewsDrift
    from jobs.batch.run import batch_spark
    from jobs.config.load import load_config
    from jobs.engine.lake.reconcile import checked_entries, reconcile_pipeline
    from jobs.loader.cli import progress
    from jobs.streaming.redis_sink import connect

    item, cfg = _pipeline(name, "reconcile"), load_config()
    checked_entries(item.spec, item.code)
    chosen = prefix or _version(cfg, item, None).prefix
    client = connect(cfg)
    drift = None
    try:
        report = reconcile_pipeline(batch_spark(cfg), cfg, item.spec, item.code, client=client, prefix=chosen,
                                    progress=progress)
    except ViewsDrift as error:
        drift, report = error, error.report
    finally:
        client.close()
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        verdict = f"{len(report.drifts)} drift(s)" if drift else "no drift"
        typer.echo(f"run {report.run_id}: checked {report.checked}, {len(report.differences)} differences, "
                   f"{verdict}, {report.expired} expired window keys not compared")
        for diff in report.differences[:MAX_LISTED]:
            typer.echo(f"  {diff.view} {diff.key}: live {diff.live_value} lake {diff.lake_value}")
        if len(report.differences) > MAX_LISTED:
            typer.echo(f"  ... {len(report.differences) - MAX_LISTED} more with --json")
    if drift is not None:
        typer.echo(f"error: {drift}", err=True)
        raise typer.Exit(drift.exit_code)
