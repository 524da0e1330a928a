"""CLI of the batch jobs: ``kappa batch list|run|submit|reconcile``, each for one pipeline (``--pipeline``).

A pipeline's batch jobs are its gold tables (jobs/batch/jobs.py); its reconcile is its own
``@pipeline.reconciler`` (jobs/batch/reconcile.py), else the engine's over its ``reconcile:``
section (``kappa pipelines reconcile``).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from jobs.config.load import load_config
from jobs.errors import ConfigError
from jobs.pipelines.cli import PIPELINE_OPTION
from jobs.spark.submit_options import Conf, DeployMode, DryRun, Master, Python

batch_app = typer.Typer(no_args_is_help=True, help=(
    "Recompute date partitions of the gold/ops batch tables from pinned lake snapshots."))

JSON_OPTION = typer.Option("--json", help="Print machine-readable JSON.")
MAX_LISTED = 50   # differences printed without --json


def register(app: typer.Typer) -> None:
    """Attach ``kappa batch``."""
    app.add_typer(batch_app, name="batch")


def progress(message: str) -> None:
    """A progress line on stderr."""
    typer.echo(f".. {message}", err=True)


def _dag(spec: object, family: str) -> str:
    """The DAG that runs a pipeline's jobs of this family.

    The factory's ``pipeline_<name>_gold`` for a pipeline the engine streams (dags/pipeline_factory.py),
    else ``batch_<family>`` (dags/batch_<family>.py).
    """
    from jobs.pipelines.spec import PipelineSpec

    assert isinstance(spec, PipelineSpec)
    return f"batch_{family}" if spec.streaming.job == "kappa-stream" else f"pipeline_{spec.name}_gold"


@batch_app.command("list")
def list_jobs(as_json: Annotated[bool, JSON_OPTION] = False,
              pipeline: Annotated[str | None, PIPELINE_OPTION] = None) -> None:
    """Every batch job of the pipeline: its table, partition column, sources, DAG and question."""
    from jobs.batch.jobs import pipeline_definition, pipeline_jobs

    cfg = load_config()
    spec = pipeline_definition(pipeline, cfg).spec
    rows = [{"job": job.name, "table": job.table, "partitioned_by": job.date_column,
             "sources": [source.table for source in job.sources], "dag": _dag(spec, job.family),
             "question": job.question} for job in pipeline_jobs(pipeline, cfg).values()]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        typer.echo(f"{row['job']:<12} {row['table']:<17} by {row['partitioned_by']:<10} "
                   f"from {', '.join(row['sources']):<40} {row['question']}")


@batch_app.command("run")
def run(
    jobs: Annotated[str, typer.Argument(help="A job, comma-separated jobs, or all (kappa batch list).")],
    start: Annotated[str, typer.Option("--from", help="First date (YYYY-MM-DD), inclusive.")],
    end: Annotated[str, typer.Option("--to", help="End date (YYYY-MM-DD), exclusive.")],
    *,
    versions: Annotated[str | None, typer.Option(
        "--versions", help='Source versions to read, JSON {"silver.events": 12} (default latest).')] = None,
    as_json: Annotated[bool, JSON_OPTION] = False,
    pipeline: Annotated[str | None, PIPELINE_OPTION] = None,
) -> None:
    """Replace the [--from, --to) partitions of each job's table, one Delta commit per table.

    Runs on the Spark service when one is up (`kappa spark up`), else on a Spark of its own.
    """
    from jobs.batch.attach import run_batch
    from jobs.batch.jobs import chosen_jobs
    from jobs.batch.run import date_range, parse_date

    cfg = load_config()
    chosen = chosen_jobs([name.strip() for name in jobs.split(",") if name.strip()], pipeline, cfg)
    dates = date_range(parse_date(start, "--from"), parse_date(end, "--to"))
    pinned = _versions(versions)
    echo_reports([run_batch(cfg, job.name, dates, progress, versions=pinned, pipeline=pipeline)
                  for job in chosen], as_json)


def echo_reports(reports: list, as_json: bool, widths: tuple[int, int] = (12, 17)) -> None:
    """Print batch runs' reports: a line per job (its job and table in ``widths``), or JSON."""
    if as_json:
        typer.echo(json.dumps([report.as_dict() for report in reports], indent=2))
        return
    for report in reports:
        sources = ", ".join(f"{table}@{version}" for table, version in report.source_versions.items())
        typer.echo(f"{report.job:<{widths[0]}} {report.table:<{widths[1]}} read={report.rows_read} "
                   f"written={report.rows_written} partitions={report.partitions_replaced} "
                   f"version={report.target_version} sources={sources}")


@batch_app.command("reconcile")
def reconcile(
    start: Annotated[str | None, typer.Option(
        "--from", help="First event date of the windows compared (default: everything).")] = None,
    end: Annotated[str | None, typer.Option("--to", help="End date, exclusive (with --from).")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the report as JSON, with every difference, also on a drift (exit 6).")] = False,
    pipeline: Annotated[str | None, PIPELINE_OPTION] = None,
) -> None:
    """Compare the pipeline's live views with the lake; exit 6 on a drift beyond its bound."""
    from jobs.batch.jobs import pipeline_definition
    from jobs.batch.reconcile import reconcile as check
    from jobs.batch.report import ViewsDrift
    from jobs.batch.run import batch_spark, date_range, parse_date

    if (start is None) != (end is None):
        raise ConfigError("give both --from and --to (a range of event dates), or neither (everything)")
    dates = None if start is None else date_range(parse_date(start, "--from"), parse_date(str(end), "--to"))
    cfg = load_config()
    loaded = pipeline_definition(pipeline, cfg)
    if loaded.code is not None and loaded.code.reconciler_fn is None:
        if dates is not None:
            raise ConfigError(f"pipeline {loaded.name} reconciles whole views: run without --from/--to")
        from jobs.pipelines.cli_lake import reconcile as engine_reconcile

        engine_reconcile(loaded.name, prefix=None, as_json=as_json)
        return
    drift = None
    try:
        report = check(batch_spark(cfg), cfg, dates, progress, pipeline=loaded.name)
    except ViewsDrift as error:
        drift, report = error, error.report
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        verdict = f"{len(report.drifts)} drift(s)" if drift else "no drift"
        typer.echo(f"run {report.run_id}: checked {report.checked}, {len(report.differences)} differences, "
                   f"{verdict}")
        for left_out in report.not_compared:
            typer.echo(f"  not compared: {left_out['what']} ({left_out['why']})")
        for item in report.differences[:MAX_LISTED]:
            typer.echo(f"  {item.view} {item.key}: live {item.live_value} lake {item.lake_value} "
                       f"(allowed {item.allowed_error:g}) {item.verdict}")
        if len(report.differences) > MAX_LISTED:
            typer.echo(f"  ... {len(report.differences) - MAX_LISTED} more in ops.reconciliation "
                       f"(run_id {report.run_id}) or with --json")
    if drift is not None:
        typer.echo(f"error: {drift}", err=True)
        raise typer.Exit(drift.exit_code)


def _versions(text: str | None) -> dict[str, int]:
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"--versions {text!r} is not JSON ({exc}); give {{\"silver.events\": 12}}"
                          ) from None
    if not isinstance(data, dict) or not all(isinstance(v, int) and v >= 0 for v in data.values()):
        raise ConfigError(f"--versions {text!r}: expected an object of table -> version (int >= 0)")
    return data


@batch_app.command("submit")
def submit(
    run_args: Annotated[list[str] | None, typer.Argument(
        help="After --: the arguments of `kappa batch run` (JOB --from DATE --to DATE).")] = None,
    *,
    master: Master = None,
    deploy_mode: DeployMode = "client",
    python: Python = None,
    conf: Conf = None,
    dry_run: DryRun = False,
    pipeline: Annotated[str | None, PIPELINE_OPTION] = None,
) -> None:
    """spark-submit a batch run (code zipped for --py-files) to a cluster: see docs/deploy.md."""
    from jobs.spark.submit import BATCH_ENTRY, submit_command

    args = [*(run_args or []), *(["--pipeline", pipeline] if pipeline else [])]
    outcome = submit_command(args, conf=conf, dry_run=dry_run, master=master,
                             deploy_mode=deploy_mode, python=python, entry=BATCH_ENTRY, name="batch")
    if isinstance(outcome, str):
        typer.echo(outcome)
    elif outcome:
        raise typer.Exit(outcome)
