"""CLI commands of jobs/loader: ``kappa load [status]``, ``quality report``, ``maintain``, ``sql``."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from jobs.config.load import load_config
from jobs.errors import ConfigError
from jobs.pipelines.cli import PIPELINE_OPTION, engine_pipeline

load_app = typer.Typer(invoke_without_command=True, help=(
    "Load Kafka topics into Delta tables exactly once (offsets committed with the data)."))
quality_app = typer.Typer(no_args_is_help=True, help="Data-quality results of the loader.")

JSON_OPTION = typer.Option("--json", help="Print machine-readable JSON.")
TABLES_OPTION = typer.Option("--tables", help="Comma-separated tables (default: all enabled).")
EXIT_CODES = {"error": 1, "conflict": 4, "failed_quality": 5}


def register(app: typer.Typer) -> None:
    """Attach ``kappa load``, ``kappa quality``, ``kappa maintain`` and ``kappa sql``."""
    app.add_typer(load_app, name="load")
    app.add_typer(quality_app, name="quality")
    app.command("maintain")(maintain)
    app.command("sql")(sql)


def progress(message: str) -> None:
    """A progress line on stderr."""
    typer.echo(f".. {message}", err=True)


def _names(tables: str | None) -> list[str] | None:
    return [name.strip() for name in tables.split(",") if name.strip()] if tables else None


@load_app.callback()
def load(
    ctx: typer.Context,
    *,
    tables: Annotated[str | None, TABLES_OPTION] = None,
    until: Annotated[str | None, typer.Option(
        "--until", help='latest (default), offsets JSON {"events.raw": {"0": 100}}, or a timestamp '
                        "(ISO with zone, or ms)")] = None,
    policy: Annotated[list[str] | None, typer.Option(
        "--policy", help="TABLE=fail|quarantine: the table's quality policy for this run (repeatable), "
                         "e.g. --policy silver.events=quarantine")] = None,
    as_json: Annotated[bool, JSON_OPTION] = False,
    pipeline: Annotated[str | None, PIPELINE_OPTION] = None,
) -> None:
    """Load each table from its recorded offsets up to --until; one Delta commit per table.

    A pipeline on the engine loads as `kappa pipelines load NAME` does (up to the latest offsets).
    """
    if ctx.invoked_subcommand is not None:
        return
    on_engine = engine_pipeline(pipeline)
    if on_engine is not None:
        from jobs.pipelines import cli_lake

        if until is not None or policy:
            raise ConfigError(f"pipeline {on_engine} runs on the engine: its tables load up to the latest "
                              "offsets with their declared policies (leave out --until and --policy)")
        cli_lake.load(on_engine, tables=tables, as_json=as_json)
        return
    from jobs.loader.attach import run_load
    from jobs.loader.offsets import parse_until
    from jobs.loader.tables import parse_policies, targets

    cfg = load_config()
    bound, chosen = parse_until(until), targets(cfg, _names(tables), parse_policies(policy))
    echo_results(run_load(cfg, chosen, bound, progress, app_name="kappa-loader"), as_json)


def echo_results(results: list, as_json: bool, width: int = 22) -> None:
    """Print a load's results (a line per table, or JSON); exit with the worst failure's code."""
    if as_json:
        typer.echo(json.dumps([result.as_dict() for result in results], indent=2))
    else:
        for result in results:
            typer.echo(f"{result.table:<{width}} {result.outcome:<15} rows={result.rows} "
                       f"quarantined={result.quarantined} version={result.version}")
    failures = [result for result in results if result.outcome in EXIT_CODES]
    for result in failures:
        typer.echo(f"error: {result.table}: {result.error}", err=True)
    if failures:
        raise typer.Exit(max(EXIT_CODES[result.outcome] for result in failures))


@load_app.command("status")
def load_status(tables: Annotated[str | None, TABLES_OPTION] = None,
                as_json: Annotated[bool, JSON_OPTION] = False) -> None:
    """Per topic-partition: loaded offset, latest offset, lag (records, seconds), last run."""
    from jobs.loader.audit import status
    from jobs.loader.tables import targets

    cfg = load_config()
    rows = status(cfg, targets(cfg, _names(tables)))
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    typer.echo(f"{'table':<22} {'topic-partition':<20} {'loaded':>8} {'latest':>8} {'lag':>8} "
               f"{'lag_s':>9}  last run")
    for row in rows:
        typer.echo(f"{row['table']:<22} {row['topic']}-{row['partition']:<{19 - len(row['topic'])}} "
                   f"{row['loaded_offset'] if row['loaded_offset'] is not None else '-':>8} "
                   f"{row['latest']:>8} {row['lag_records']:>8} {row['lag_s'] or 0:>9.1f}  "
                   f"{row['last_outcome'] or '-'} {row['last_run_at'] or ''}")


@quality_app.command("report")
def quality_report(runs: Annotated[int, typer.Option("--runs", help="Validations per table.")] = 5,
                   as_json: Annotated[bool, JSON_OPTION] = False) -> None:
    """Summarise the last validations of each table (ops.quality_results)."""
    from jobs.loader.quality import report

    entries = report(load_config(), runs)
    if as_json:
        typer.echo(json.dumps(entries, indent=2))
        return
    if not entries:
        typer.echo("no validations yet: run `kappa load`")
    for entry in entries:
        verdict = "PASS" if not entry["failed"] else "FAIL"
        typer.echo(f"{verdict} {entry['table']:<22} run={entry['run_id']} rows={entry['rows']} "
                   f"passed={entry['passed']} at {entry['checked_at']}")
        for failure in entry["failed"]:
            typer.echo(f"     - {failure['rule']}: unexpected={failure['unexpected']} "
                       f"observed={failure['observed']} blocking={failure['blocking']}")


def maintain(
    tables: Annotated[str | None, TABLES_OPTION] = None,
    retention_h: Annotated[int | None, typer.Option(
        "--retention-h", help="Vacuum retention in hours (default loader.vacuum_retention_h).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report what would change.")] = False,
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Compact closed partitions, vacuum old files (never below the floor); files/bytes before/after."""
    from jobs.loader.maintain import run_maintenance
    from jobs.loader.tables import targets

    cfg = load_config()
    reports = run_maintenance(cfg, targets(cfg, _names(tables)), retention_h, dry_run, progress)
    if as_json:
        typer.echo(json.dumps(reports, indent=2))
        return
    for item in reports:
        typer.echo(f"{item['table']:<22} files {item['files_before']} -> {item['files_after']}, bytes "
                   f"{item['bytes_before']} -> {item['bytes_after']}, compacted partitions "
                   f"{item['compacted_partitions']}, vacuumed {item['vacuumed_files']}")


def sql(
    query: Annotated[str, typer.Argument(help="SELECT over tables named schema.table (docs/tables.md).")],
    fmt: Annotated[str, typer.Option("--format", help="table, json or csv")] = "table",
) -> None:
    """Run read-only SQL (DuckDB) over every Delta table of the lake."""
    from jobs.loader.sql import render, run_sql

    columns, rows = run_sql(load_config(), query)
    typer.echo(render(columns, rows, fmt))
