"""CLI of the streaming job: ``kappa stream run|status|stop|checkpoint`` and ``kappa summaries``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from jobs.config.load import load_config
from jobs.errors import ConfigError
from jobs.pipelines.cli import PIPELINE_OPTION, engine_pipeline
from jobs.spark.submit_options import Conf, DeployMode, DryRun, Master, Python

stream_app = typer.Typer(no_args_is_help=True, help="Run and inspect the kappa-stream pipeline's job.")

JSON_OPTION = typer.Option("--json", help="Print machine-readable JSON.")


def register(app: typer.Typer) -> None:
    """Attach ``kappa stream`` and ``kappa summaries``."""
    from jobs.streaming.checkpoint_cli import checkpoint_app
    from jobs.streaming.summaries_cli import summaries

    stream_app.add_typer(checkpoint_app, name="checkpoint")
    app.add_typer(stream_app, name="stream")
    app.command("summaries")(summaries)


def progress(message: str) -> None:
    """A progress line on stderr."""
    typer.echo(f".. {message}", err=True)


def parse_bound(text: str | None, flag: str) -> Any:
    """``earliest`` / ``latest`` / offsets JSON / ISO timestamp with zone / epoch ms."""
    if text is None:
        return None
    value = text.strip()
    if value in ("earliest", "latest"):
        return value
    if value.startswith("{"):
        try:
            data = json.loads(value)
        except ValueError as exc:
            raise ConfigError(f"{flag} {value!r} is not valid JSON ({exc}); give an object of "
                              'topic -> partition -> offset, e.g. {"<topic>": {"0": 100}}') from None
        if not isinstance(data, dict):
            raise ConfigError(f"{flag} must be an object of topic -> partition -> offset")
        return data
    if value.isdigit():
        return datetime.fromtimestamp(int(value) / 1000, tz=UTC)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{flag} {value!r}: expected earliest, latest, offsets JSON, an ISO "
                          "timestamp with a zone (2026-01-01T00:00:00Z) or epoch milliseconds") from None
    if moment.tzinfo is None:
        raise ConfigError(f"{flag} {value!r} has no time zone; add Z or +00:00")
    return moment


def check_run_options(mode: str, to: str | None, max_offsets: int | None) -> None:
    """Refuse a run's contradictory or out-of-range options (one readable line)."""
    if mode not in ("live", "replay"):
        raise ConfigError(f"--mode {mode!r}: choose live or replay")
    if mode == "live" and to is not None:
        raise ConfigError("--to only applies to --mode replay; a live query runs until stopped")
    if max_offsets is not None and max_offsets < 1:
        raise ConfigError(f"--max-offsets-per-trigger must be >= 1, got {max_offsets}")


def _sinks(text: str) -> frozenset[str]:
    from jobs.streaming.run_spec import SINKS

    chosen = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = sorted(chosen - set(SINKS))
    if unknown or not chosen:
        raise ConfigError(f"--sinks {text!r}: choose from {', '.join(SINKS)} (comma-separated)")
    return chosen


@stream_app.command("run")
def run(
    *,
    mode: Annotated[str, typer.Option("--mode", help="live (until SIGTERM) or replay (a bounded range).")
                    ] = "live",
    from_: Annotated[str | None, typer.Option(
        "--from", help="Replay start: earliest, offsets JSON, ISO timestamp or epoch ms. Live: where a "
                       "new checkpoint starts (default earliest).")] = None,
    to: Annotated[str | None, typer.Option(
        "--to", help="Replay end (exclusive): latest (default), offsets JSON, timestamp.")] = None,
    sinks: Annotated[str, typer.Option("--sinks", help="Comma-separated: kafka, redis.")] = "kafka,redis",
    query: Annotated[str | None, typer.Option(
        "--query", help="Query name (default streaming.query_name; replays derive one from the range).")
                     ] = None,
    skip_lost: Annotated[bool, typer.Option(
        "--skip-lost", help="Continue when checkpointed offsets are no longer retained.")] = False,
    fresh: Annotated[bool, typer.Option("--fresh", help="Replay: discard this range's checkpoint first.")
                     ] = False,
    max_offsets: Annotated[int | None, typer.Option(
        "--max-offsets-per-trigger", help="Records per micro-batch (default from conf).")] = None,
    version: Annotated[int | None, typer.Option(
        "--version", help="View version whose outputs the run writes (default: the current one; "
                          "docs/reprocess.md).")] = None,
    pipeline: Annotated[str | None, PIPELINE_OPTION] = None,
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Run a pipeline's streaming job: live until SIGTERM (stops after the current batch), or replay a range.

    A pipeline on the engine runs as `kappa pipelines run NAME` does (--skip-lost does not apply).
    """
    from jobs.host.processes import register_process
    from jobs.streaming.attach import run_stream
    from jobs.streaming.run_spec import RunSpec

    on_engine = engine_pipeline(pipeline)
    if on_engine is not None:
        from jobs.pipelines import cli_run

        cli_run.run(on_engine, mode=mode, from_=from_, to=to, sinks=sinks, prefix=None, query=query,
                   output_suffix=None, params=None, fresh=fresh, max_offsets=max_offsets,
                   version=version, as_json=as_json)
        return

    check_run_options(mode, to, max_offsets)
    spec = RunSpec(mode=mode,  # type: ignore[arg-type]
                   query=query, starting=parse_bound(from_, "--from") or "earliest",
                   ending=(parse_bound(to, "--to") or "latest") if mode == "replay" else None,
                   sinks=_sinks(sinks), skip_lost=skip_lost, max_offsets_per_trigger=max_offsets,
                   fresh=fresh)
    if version is not None and version < 1:
        raise ConfigError(f"--version must be >= 1, got {version}")
    from jobs.views.versions import current_version, version_config

    base = load_config()
    chosen = version if version is not None else current_version(base)
    cfg = version_config(base, chosen)
    with register_process(cfg, job_name(chosen)):
        report = run_stream(cfg, spec, progress=progress, release_early=True)
    if as_json:
        typer.echo(json.dumps(report.as_dict()))
        return
    typer.echo(f"query {report.query} ({report.mode}): {report.batches} batches, "
               f"{report.records_read} records read, {report.valid} valid, "
               f"{report.dead_lettered} dead-lettered, {report.late} late, in {report.duration_s:.1f} s")
    for sink, count in report.written.items():
        typer.echo(f"  written to {sink}: {count}")


@stream_app.command("submit")
def submit(
    run_args: Annotated[list[str] | None, typer.Argument(
        help="After --: the options of `kappa stream run` (--mode replay --from earliest ...).")] = None,
    *,
    master: Master = None,
    deploy_mode: DeployMode = "client",
    python: Python = None,
    conf: Conf = None,
    dry_run: DryRun = False,
) -> None:
    """spark-submit the job (code zipped for --py-files) to a cluster: see docs/deploy.md."""
    from jobs.spark.submit import submit_command

    outcome = submit_command(run_args or [], conf=conf, dry_run=dry_run, master=master,
                             deploy_mode=deploy_mode, python=python)
    if isinstance(outcome, str):
        typer.echo(outcome)
    elif outcome:
        raise typer.Exit(outcome)


@stream_app.command("status")
def status(as_json: Annotated[bool, JSON_OPTION] = False,
           hide_finished: Annotated[bool, typer.Option(
               "--hide-finished", help="Leave out replays that reached their end.")] = False,
           pipeline: Annotated[str | None, PIPELINE_OPTION] = None) -> None:
    """Every query that reported: state (running, waiting, finished, stopped, failed), last batch, lag."""
    from jobs.streaming.status import status_lines, version_status_rows

    on_engine = engine_pipeline(pipeline)
    if on_engine is not None:
        from jobs.pipelines import cli_versions

        cli_versions.status(on_engine, as_json=as_json)
        return

    rows = version_status_rows(load_config(), finished=not hide_finished)
    if as_json:
        typer.echo(json.dumps(rows))
        return
    if not rows:
        typer.echo("no query has reported yet (start one with `kappa stream run`)")
    for row in rows:
        for line in status_lines(row):
            typer.echo(line)


@stream_app.command("stop")
def stop(grace_s: Annotated[float, typer.Option("--grace", help="Seconds before SIGKILL.")] = 300.0,
         version: Annotated[int | None, typer.Option(
             "--version", help="Stop the job of this view version (default: the current one).")] = None,
         pipeline: Annotated[str | None, PIPELINE_OPTION] = None) -> None:
    """Stop the current view version's streaming job gracefully (after the current batch)."""
    from jobs.host.processes import registered, stop_registered
    from jobs.views.versions import current_version

    on_engine = engine_pipeline(pipeline)
    if on_engine is not None:
        from jobs.pipelines import cli_versions

        cli_versions.stop(on_engine, version_number=version, grace_s=grace_s)
        return

    cfg = load_config()
    if version is not None and version < 1:
        raise ConfigError(f"--version must be >= 1, got {version}")
    chosen = version if version is not None else current_version(cfg)
    name = job_name(chosen)
    running = [item.name for item in registered(cfg) if item.name == "streaming"
               or item.name.startswith("streaming-v")]
    others = sorted(other for other in running if other != name)
    if name not in running:
        typer.echo(f"no streaming job of view version {chosen} runs ({name} is not registered)"
                   + (f"; running: {', '.join(others)} (stop one with --version N)" if others else ""))
        return
    stop_registered(cfg, grace_s=grace_s, progress=progress, names=(name,))
    if others:
        typer.echo(f"still running: {', '.join(others)} (stop one with --version N)")


def job_name(version: int) -> str:
    """The registered name of the streaming job writing a view version."""
    return "streaming" if version == 1 else f"streaming-v{version}"
