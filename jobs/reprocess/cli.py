"""``kappa reprocess start|status|diff|promote|retire`` and ``kappa views`` (docs/reprocess.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from jobs.config.load import load_config
from jobs.errors import ConfigError
from jobs.pipelines import cli_versions
from jobs.pipelines.cli import PIPELINE_OPTION, engine_pipeline

reprocess_app = typer.Typer(no_args_is_help=True, help=(
    "Rebuild the views from the log into a new version beside the current one, compare, switch."))

JSON_OPTION = typer.Option("--json", help="Print machine-readable JSON.")
VERSION_OPTION = typer.Option("--version", "-V", help="The view version (2, 3, ...).")


def register(app: typer.Typer) -> None:
    """Attach ``kappa reprocess``."""
    app.add_typer(reprocess_app, name="reprocess")


def progress(message: str) -> None:
    """A progress line on stderr."""
    typer.echo(f".. {message}", err=True)


def _version(version: int) -> int:
    if version < 1:
        raise ConfigError(f"--version must be >= 1, got {version}")
    return version


def _emit(data: object, as_json: bool, lines: list[str]) -> None:
    if as_json:
        typer.echo(json.dumps(data, default=str))
    else:
        for line in lines:
            typer.echo(line)


@reprocess_app.command("start")
def start(version: Annotated[int, VERSION_OPTION], as_json: Annotated[bool, JSON_OPTION] = False,
          pipeline: Annotated[str | None, PIPELINE_OPTION] = None) -> None:
    """Start version N's live job from the earliest retained offset into its own outputs.

    A pipeline on the engine builds the version to the log's end first (`kappa pipelines reprocess`).
    """
    from jobs.reprocess.core import start as starting

    on_engine = engine_pipeline(pipeline)
    if on_engine is not None:
        cli_versions.reprocess(on_engine, _version(version), params=None, as_json=as_json)
        return

    result = starting(load_config(), _version(version), progress)
    _emit(result, as_json, [f"version {result['version']}: job {result['query']} runs (pid {result['pid']}), "
                            f"Redis prefix {result['redis_prefix']}, topics {', '.join(result['topics'])}"])


@reprocess_app.command("status")
def status(as_json: Annotated[bool, JSON_OPTION] = False,
           pipeline: Annotated[str | None, PIPELINE_OPTION] = None) -> None:
    """Every view version with outputs: state, its job, lag and time to catch up."""
    from jobs.reprocess.core import status as statuses

    on_engine = engine_pipeline(pipeline)
    if on_engine is not None:
        cli_versions.status(on_engine, as_json=as_json)
        return

    rows = statuses(load_config())
    _emit(rows, as_json, [status_line(r) for r in rows])


def status_line(row: dict) -> str:
    """One version's line: its job, and its last batch, or why there is none."""
    job = f"running (pid {row['running_pid']})" if row["running_pid"] else "not running"
    head = f"v{row['version']} {row['state']}: query {row['query']} {job}"
    if row.get("redis_data") == "lost":
        return (f"{head}; its Redis data is LOST (the fence {row['redis_prefix']}:fence:summaries is gone "
                "while its query committed batches): rebuild with `kappa reprocess start` "
                "(docs/runbooks/redis-lost.md)")
    if row["last_batch"] is None:
        return f"{head}; no batch applied yet"
    return (f"{head}, last batch {row['last_batch']} {row['last_batch_age_s']} s ago, "
            f"{row['offsets_behind_latest']} behind, {row['rows_per_s']:.0f} rows/s, eta {row['eta_s']} s")


@reprocess_app.command("diff")
def diff(version: Annotated[int, VERSION_OPTION],
         out: Annotated[Path | None, typer.Option("--out", help="Write the JSON report here.")] = None,
         as_json: Annotated[bool, JSON_OPTION] = False,
         pipeline: Annotated[str | None, PIPELINE_OPTION] = None) -> None:
    """Compare version N's Redis view with the current one key by key (JSON report with --out)."""
    from jobs.reprocess.diff import diff_views, summary_lines
    from jobs.views.versions import current_version

    on_engine = engine_pipeline(pipeline)
    if on_engine is not None:
        cli_versions.diff(on_engine, _version(version), as_json=as_json)
        return

    cfg = load_config()
    report = diff_views(cfg, current_version(cfg), _version(version))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2, default=str))
        progress(f"report written to {out}")
    _emit(report, as_json, list(summary_lines(report)))


@reprocess_app.command("promote")
def promote(version: Annotated[int, VERSION_OPTION],
            max_behind: Annotated[int | None, typer.Option(
                "--max-behind", help="Caught up: the job's last batch left at most this many records "
                                     "(default: no further behind than the current version's job).")] = None,
            timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for catch-up.")] = 600,
            as_json: Annotated[bool, JSON_OPTION] = False,
            pipeline: Annotated[str | None, PIPELINE_OPTION] = None) -> None:
    """Wait until version N has caught up, make it current, stop the old version's live job."""
    from jobs.reprocess.core import promote as promoting

    on_engine = engine_pipeline(pipeline)
    if on_engine is not None:
        cli_versions.promote(on_engine, _version(version), as_json=as_json,
                             max_behind=cli_versions.MAX_BEHIND if max_behind is None else max_behind)
        return

    if (max_behind is not None and max_behind < 0) or timeout <= 0:
        raise ConfigError("--max-behind must be >= 0 and --timeout > 0")
    result = promoting(load_config(), _version(version), max_behind=max_behind, timeout_s=timeout,
                       progress=progress)
    _emit(result, as_json, [f"view version {result['current']} is current (was {result['previous']})"])


@reprocess_app.command("retire")
def retire(version: Annotated[int, VERSION_OPTION], as_json: Annotated[bool, JSON_OPTION] = False,
           pipeline: Annotated[str | None, PIPELINE_OPTION] = None) -> None:
    """Delete a non-current version's Redis keys, topics, tables and checkpoint."""
    from jobs.reprocess.core import retire as retiring

    on_engine = engine_pipeline(pipeline)
    if on_engine is not None:
        cli_versions.retire(on_engine, _version(version), as_json=as_json)
        return

    result = retiring(load_config(), _version(version), progress)
    _emit(result, as_json, [f"retired view version {result['version']}: {result['redis_keys_deleted']} Redis "
                            f"keys, topics {result['topics_deleted']}, tables {result['tables_deleted']}"])
