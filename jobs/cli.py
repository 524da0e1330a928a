"""``kappa``: the one command line for every operator action.

Errors the operator can fix print one ``error: ...`` line and exit non-zero (2 for bad
config or arguments); ``-v`` adds logs.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from typer._click import exceptions as click_errors

from jobs.config.load import KappaConfig, load_config
from jobs.errors import KappaError
from jobs.pipelines.cli import PIPELINE_OPTION

console = Console()
err_console = Console(stderr=True)

app = typer.Typer(
    name="kappa", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="Operate the kappa data platform: embedded stack, topics, collector, Spark jobs.")
stack_app = typer.Typer(no_args_is_help=True, help="Start, stop and inspect the embedded stack.")
topics_app = typer.Typer(no_args_is_help=True, help="Apply and list the topics declared in conf/.")
app.add_typer(stack_app, name="stack")
app.add_typer(topics_app, name="topics")

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON.")


@app.callback()
def _root(
    env: str = typer.Option(None, "--env", "-e", help="Config environment (default KAPPA_ENV or local)."),
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, metavar="", show_default=False,
                                help="Repeatable: -v INFO logs, -vv DEBUG."),
) -> None:
    if env:
        os.environ["KAPPA_ENV"] = env
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # librdkafka logs a line per reconnect attempt: shown with -v, else only our `error:` line
    logging.getLogger("jobs.kafka.librdkafka").setLevel(
        logging.DEBUG if verbose else logging.CRITICAL + 1)


def config() -> KappaConfig:
    """The configuration of this invocation (raises ConfigError, exit 2, when invalid)."""
    return load_config()


def progress(message: str) -> None:
    """Progress lines for long operator commands go to stderr."""
    err_console.print(f"[dim]..[/dim] {message}", highlight=False)


@stack_app.command("up")
def stack_up() -> None:
    """Start the embedded Kafka broker and Redis (only those with embedded: true); wait for health."""
    from jobs.stack.embedded import EmbeddedStack

    _print_status(EmbeddedStack(config()).up(progress=progress), as_json=False)


@stack_app.command("down")
def stack_down(wipe: bool = typer.Option(False, "--wipe", help="Also delete the stack's data.")) -> None:
    """Stop what `kappa stack up` started (by pidfile); data is kept unless --wipe."""
    from jobs.stack.embedded import EmbeddedStack

    EmbeddedStack(config()).down(wipe=wipe, progress=progress)


@stack_app.command("status")
def stack_status(as_json: bool = JSON_OPTION) -> None:
    """Show each service, its address, pid and health; exit 1 if any is unhealthy."""
    from jobs.stack.embedded import EmbeddedStack

    rows = EmbeddedStack(config()).status()
    _print_status(rows, as_json)
    if not all(row.healthy for row in rows):
        raise typer.Exit(1)


@stack_app.command("logs")
def stack_logs(
    service: str = typer.Argument(..., help="kafka or redis"),
    lines: int = typer.Option(50, "--lines", "-n", help="How many lines from the end."),
) -> None:
    """Print the end of an embedded service's log."""
    from jobs.stack.embedded import EmbeddedStack

    if service not in ("kafka", "redis"):
        raise typer.BadParameter(f"unknown service {service!r}; choose kafka or redis")
    path = EmbeddedStack(config()).log_path(service)
    if not path.exists():
        raise KappaError(f"no log at {path}: {service} was never started by `kappa stack up`")
    console.print("\n".join(path.read_text(errors="replace").splitlines()[-lines:]), highlight=False)


def _print_status(rows, as_json: bool) -> None:
    if as_json:
        console.print_json(json.dumps([asdict(row) for row in rows]))
        return
    table = Table("service", "address", "managed", "pid", "health")
    for row in rows:
        health = "[green]healthy[/green]" if row.healthy else f"[red]down[/red] {row.detail}"
        table.add_row(row.name, row.address, "embedded" if row.managed else "external",
                      str(row.pid or "-"), health)
    print_table(table)


def print_table(table: Table) -> None:
    """Print a table at its natural width: names are never cut to fit 80 columns."""
    natural = console.measure(table, options=console.options.update_width(10_000)).maximum
    Console(width=max(console.width, natural), file=console.file).print(table)


@topics_app.command("apply")
def topics_apply(
    allow_partition_increase: bool = typer.Option(
        False, help="Add partitions where fewer exist than declared (moves keys)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Create missing topics and align their configs; report drift; exit 3 on drift."""
    from jobs.kafka.topics import apply_topics

    cfg = config()
    results = apply_topics(cfg.kafka, cfg.topics, allow_partition_increase)
    if as_json:
        console.print_json(json.dumps([asdict(r) for r in results]))
    else:
        for result in results:
            detail = "; ".join(result.changes + result.drift)
            console.print(f"{result.name:<20} {result.action:<10} {detail}", highlight=False)
    if any(r.drift for r in results):
        err_console.print("error: drift that apply cannot fix is listed above; see "
                          "docs/runbooks/topics.md")
        raise typer.Exit(3)


@topics_app.command("list")
def topics_list(
    all_topics: bool = typer.Option(False, "--all", help="Include topics not declared in conf/."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Show partitions, earliest/latest offsets and retention of each topic (every view version's)."""
    from jobs.kafka.topics import list_topics
    from jobs.views.versions import read_views, version_config

    cfg = config()
    infos = list_topics(cfg.kafka, None if all_topics else list(cfg.topics))   # fails fast: Kafka down
    if not all_topics:
        listed = [info.name for info in infos]
        for version in read_views(cfg).live():   # every view version's own topics too
            versioned = version_config(cfg, version)
            s = versioned.streaming
            extra = [name for name in [*versioned.topics, s.analyzed_topic, s.summaries_topic, s.dlq_topic]
                     if name not in listed and name not in cfg.topics]
            infos += list_topics(cfg.kafka, extra) if extra else []
            listed += extra
    if as_json:
        console.print_json(json.dumps([asdict(i) | {"records": i.records} for i in infos]))
        return
    table = Table("topic", "partitions", "earliest", "latest", "records", "retention.ms", "cleanup")
    for info in infos:
        table.add_row(info.name, str(len(info.partitions)),
                      ",".join(str(p.earliest) for p in info.partitions),
                      ",".join(str(p.latest) for p in info.partitions),
                      str(info.records), info.retention_ms, info.cleanup_policy)
    print_table(table)


@app.command("doctor")
def doctor(as_json: bool = JSON_OPTION) -> None:
    """Check Java, Python, Spark and the services; explain the Kafka and Delta backend choice."""
    from jobs.doctor import run_doctor
    from jobs.monitoring.local import doctor_check

    report = run_doctor(config())
    report["checks"].append(doctor_check(config()))
    if as_json:
        console.print_json(json.dumps(report))
    else:
        for check in report["checks"]:
            mark = "[green]ok[/green]  " if check["ok"] else "[red]FAIL[/red]"
            console.print(f"{mark} {check['name']:<14} {check['detail']}", highlight=False)
    if not all(c["ok"] for c in report["checks"]):
        raise typer.Exit(1)


@app.command("config")
def show_config() -> None:
    """Print the effective configuration as JSON (secrets masked)."""
    console.print_json(config().model_dump_json())


@app.command("demo")
def demo(pipeline: Annotated[str | None, PIPELINE_OPTION] = None) -> None:
    """Run a pipeline's demo, the platform end to end on the embedded stack (make demo: the default's)."""
    from jobs.errors import ConfigError
    from jobs.pipelines.cli import pipeline_hook

    spec, run = pipeline_hook(pipeline, "demo")
    if run is None:
        raise ConfigError(f"pipeline {spec.name} has no demo (no `demo:` in its pipeline.yaml); choose one "
                          "that has with --pipeline NAME, or give it a demo file "
                          "(docs/reference/pipeline-yaml.md)")
    cfg = load_config(overrides={"pipelines.default": spec.name})   # the config's layer of that pipeline
    raise typer.Exit(run(cfg, lambda line: console.print(line, highlight=False)))


def _register_subcommands() -> None:
    """Attach the command groups that live beside the code they operate."""
    from jobs.batch import cli as batch_cli
    from jobs.collector import cli as collector_cli
    from jobs.loader import cli as loader_cli
    from jobs.monitoring import cli as monitoring_cli
    from jobs.orchestration import cli as airflow_cli
    from jobs.pipelines import cli as pipelines_cli
    from jobs.reprocess import cli as reprocess_cli
    from jobs.serve import cli as serve_cli
    from jobs.spark_service import cli as spark_cli
    from jobs.streaming import cli as streaming_cli

    for module in (collector_cli, streaming_cli, reprocess_cli, loader_cli, batch_cli, serve_cli,
                   airflow_cli, spark_cli, monitoring_cli, pipelines_cli):
        module.register(app)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the process exit code (a Spark it started is gone by then)."""
    from jobs.spark.session import release_spark

    try:
        return _run(argv)
    finally:
        release_spark()


def _run(argv: list[str] | None) -> int:
    _register_subcommands()
    try:
        result = app(args=argv, prog_name="kappa", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        err_console.print("aborted")
        return 130
    except click_errors.NoArgsIsHelpError as exc:
        exc.show()
        return 0
    except click_errors.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KappaError as exc:
        err_console.print(f"error: {exc}", highlight=False, markup=False, emoji=False, soft_wrap=True)
        return exc.exit_code
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
