"""CLI commands of the collection tier: ``kappa generate`` and ``kappa collect ...``."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from jobs.config.load import load_config
from jobs.errors import ConfigError, KappaError
from jobs.pipelines.cli import PIPELINE_OPTION

collect_app = typer.Typer(invoke_without_command=True, help=(
    "Run the collector (--http and/or one of --file, --stdin, --url) and operate its log."))
failed_app = typer.Typer(no_args_is_help=True, help="Inspect and re-drive the failed store.")
collect_app.add_typer(failed_app, name="failed")

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON.")


def register(app: typer.Typer) -> None:
    """Attach ``kappa generate`` and ``kappa collect`` to the root CLI."""
    from jobs.collector.generate_cli import generate

    app.command("generate")(generate)
    app.add_typer(collect_app, name="collect")


def progress(message: str) -> None:
    """A progress line on stderr."""
    typer.echo(f".. {message}", err=True)


@collect_app.callback()
def collect(
    ctx: typer.Context,
    *,
    http: Annotated[bool, typer.Option("--http", help=(
        "Serve POST /records (also at /<source topic up to its first dot>), /metrics, /healthz."))] = False,
    file: Annotated[Path | None, typer.Option(
        "--file", help="Pull a JSON-lines file, then drain and exit.")] = None,
    stdin: Annotated[bool, typer.Option("--stdin", help="Pull JSON lines from standard input.")] = False,
    url: Annotated[str | None, typer.Option(
        "--url", help="Pull a ws://, wss://, http:// or https:// stream.")] = None,
    port: Annotated[int | None, typer.Option(
        "--port", help="HTTP port (default collector.port; 0 = any free).")] = None,
    topic: Annotated[str | None, typer.Option(
        "--topic", help="Topic for accepted records (default: the pipeline's or collector.topic).")] = None,
    dlq_topic: Annotated[str | None, typer.Option(
        "--dlq-topic", help="Dead-letter topic (default: the pipeline's or collector.dlq_topic).")] = None,
    drain_timeout: Annotated[float | None, typer.Option(
        "--drain-timeout", help="Seconds without a broker ack before a finished pull gives up and "
        "exits 1 (records stay in the log); also the drain on SIGTERM (default "
        "collector.drain_timeout_s).")] = None,
    pipeline: Annotated[str | None, PIPELINE_OPTION] = None,
) -> None:
    """Collect a pipeline's events into Kafka without losing any (log first, produce, delete on ack).

    Records pass the pipeline's structural check (`collect:` in its pipeline.yaml, else a JSON object
    keyed by its `source.key` field); rejects go to the dead-letter topic. For a pipeline on the
    engine the topics are its own (`source`, `outputs.dlq`), else collector.topic and dlq_topic.
    """
    if ctx.invoked_subcommand is not None:
        return
    from jobs.collector.run import bind_http, pipeline_settings, run_collector
    from jobs.collector.service import Collector

    sources = [name for name, given in (("--file", file), ("--stdin", stdin), ("--url", url)) if given]
    if len(sources) > 1:
        raise ConfigError(f"choose one stream source, got {' and '.join(sources)}")
    if not sources and not http:
        raise ConfigError("nothing to collect: give --http, or one of --file PATH, --stdin, --url URL "
                          "(see `kappa collect --help`)")
    if port is not None and not 0 <= port <= 65535:
        raise ConfigError(f"--port must be between 0 and 65535, got {port}")
    if drain_timeout is not None and drain_timeout <= 0:
        raise ConfigError(f"--drain-timeout must be a positive number of seconds, got {drain_timeout:g}")
    source = _source(file, stdin, url)
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        logging.getLogger("jobs.collector.librdkafka").setLevel(logging.CRITICAL)  # -vv shows them
    cfg = load_config()
    settings = pipeline_settings(cfg, pipeline, topic=topic, dlq_topic=dlq_topic, port=port,
                                 drain_timeout_s=drain_timeout)
    listener = bind_http(settings.host, settings.port) if http else None
    collector = Collector(settings, cfg.kafka.client_config())
    from jobs.host.processes import register_process

    with register_process(cfg, "collector"):  # `kappa stack down` stops it before the broker
        run_collector(collector, http, source, progress, listener=listener)


def _source(file: Path | None, stdin: bool, url: str | None):
    from jobs.collector import pull
    from jobs.collector.run import Source

    if file is not None:
        if not file.is_file():
            raise ConfigError(f"--file {file} does not exist or is not a file; give a JSON-lines file")
        return Source("file", pull.file_chunks(file))
    if stdin:
        return Source("stdin", pull.stdin_chunks())
    if url is not None:
        import threading

        stop = threading.Event()
        return Source("url", pull.url_chunks(pull.validate_url(url), stop), stop)
    return None


@collect_app.command("status")
def status(
    as_json: bool = JSON_OPTION,
    url: str = typer.Option(None, "--url", help="Collector base URL (default from collector.host/port)."),
) -> None:
    """Show counts and rates from the running collector's /metrics, else from its log file."""
    cfg = load_config()
    base = url or f"http://{cfg.collector.host}:{cfg.collector.port}"
    snapshot, origin = _live_metrics(base)
    if snapshot is None:
        snapshot, origin = _log_metrics(Path(cfg.collector.log_path), cfg.collector.buffer_limit, base)
    if as_json:
        typer.echo(json.dumps({
            "source": origin, "totals": snapshot.totals, "gauges": snapshot.gauges,
            "rates": snapshot.rates, "rejected_by_reason": snapshot.rejected_by_reason}))
        return
    typer.echo(f"source        {origin}")
    for name in ("accepted", "acknowledged", "rejected", "failed"):
        rate = f"  ({snapshot.rates[name]:.1f}/s)" if name in snapshot.rates else ""
        typer.echo(f"{name:<13} {snapshot.value(name)}{rate}")
    gauges = snapshot.gauges
    typer.echo(f"pending       {gauges.get('pending', 0):.0f} / buffer_limit "
               f"{gauges.get('buffer_limit', 0):.0f} "
               f"(rejects pending {gauges.get('pending_rejects', 0):.0f})")
    typer.echo(f"failed store  {gauges.get('failed_store', 0):.0f}")
    typer.echo(f"oldest        {gauges.get('oldest_pending_age_seconds', 0):.1f} s")
    if "broker_up" in gauges:
        typer.echo(f"broker        {'up' if gauges['broker_up'] else 'DOWN'}")
    if snapshot.rejected_by_reason:
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(snapshot.rejected_by_reason.items()))
        typer.echo(f"rejected by   {reasons}")


def _live_metrics(base: str):
    import httpx

    from jobs.collector import metrics

    try:
        response = httpx.get(f"{base.rstrip('/')}/metrics", timeout=2.0)
        response.raise_for_status()
    except httpx.HTTPError:
        return None, None
    return metrics.parse(response.text), f"{base.rstrip('/')}/metrics"


def _log_metrics(path: Path, buffer_limit: int, base: str):
    from jobs.collector import metrics

    if not path.exists():
        raise KappaError(f"the collector is not running (no answer at {base}) and has no log at {path}; "
                         "start it with `kappa collect --http`")
    log = _open_log(path)
    try:
        snapshot = metrics.from_log(log.counters(), log.pending_counts(), buffer_limit,
                                    log.oldest_pending_age(time.time()))
    finally:
        log.db.close()
    holder = _lock_holder(path)
    state = f"collector pid {holder} holds the log" if holder else "collector not running"
    return snapshot, f"log file {path} ({state}; no answer at {base})"


def _open_log(path: Path):
    from jobs.collector.log import MessageLog

    if not path.exists():
        raise KappaError(f"no collector log at {path} (collector.log_path); nothing has been collected "
                         "with this configuration")
    return MessageLog(path)


def _lock_holder(path: Path) -> str | None:
    import fcntl

    lock_path = Path(f"{path}.lock")
    if not lock_path.exists():
        return None
    with lock_path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            return handle.read().strip() or "unknown"
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


@failed_app.command("list")
def failed_list(
    limit: int = typer.Option(20, "--limit", "-n", help="How many (oldest first)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """List records that ran out of delivery attempts, with the broker's last error."""
    log = _open_log(Path(load_config().collector.log_path))
    try:
        rows, total = log.failed_rows(limit), log.pending_counts()["failed"]
    finally:
        log.db.close()
    if as_json:
        typer.echo(json.dumps({"total": total, "records": rows}))
        return
    shown = f"; showing {len(rows)}" if total > len(rows) else ""
    typer.echo(f"{total} record(s) in the failed store{shown}")
    for row in rows:
        when = datetime.fromtimestamp(float(row["failed_at"]), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        typer.echo(f"{row['id']:>10}  {row['topic']}  key={row['key']}  {row['bytes']} B  "
                   f"attempts={row['attempts']}  {when}  {row['reason']}")


@failed_app.command("redrive")
def failed_redrive(
    *,
    all_records: Annotated[bool, typer.Option("--all", help="Re-drive every failed record.")] = False,
    ids: Annotated[list[int] | None, typer.Option(
        "--id", help="Re-drive this failed record (repeatable).")] = None,
) -> None:
    """Move failed records back to the log; the collector produces them again."""
    if all_records == bool(ids):
        raise ConfigError("choose either --all or one or more --id N (see `kappa collect failed list`)")
    log = _open_log(Path(load_config().collector.log_path))
    try:
        moved = log.redrive(None if all_records else ids, time.time())
    finally:
        log.db.close()
    running = _lock_holder(Path(load_config().collector.log_path))
    when = (f"collector pid {running} produces them now" if running
            else "they are produced when the collector starts")
    typer.echo(f"re-drove {moved} record(s) to the log; {when}")
