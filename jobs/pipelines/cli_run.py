"""``kappa pipelines run | view | produce``: a pipeline's streaming job, its views, its source topic."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from jobs.errors import ConfigError
from jobs.pipelines.cli import (
    JSON_OPTION,
    VERSION_OPTION,
    _one,
    _param,
    _version,
    pipelines_app,
    process_name,
)


@pipelines_app.command("run")
def run(
    name: Annotated[str, typer.Argument(help="The pipeline's name.")],
    *,
    mode: Annotated[str, typer.Option("--mode", help="live (until SIGTERM) or replay (a range, then exit).")
                    ] = "live",
    from_: Annotated[str | None, typer.Option(
        "--from", help="Start: earliest (default), offsets JSON, ISO timestamp or epoch ms.")] = None,
    to: Annotated[str | None, typer.Option("--to", help="Replay end (exclusive): latest (default), offsets "
                                                       "JSON, timestamp.")] = None,
    sinks: Annotated[str, typer.Option("--sinks", help="Comma-separated: kafka, redis.")] = "kafka,redis",
    prefix: Annotated[str | None, typer.Option(
        "--prefix", help="Redis prefix of the views (default: the pipeline's redis_prefix).")] = None,
    query: Annotated[str | None, typer.Option("--query", help="Query name, its checkpoint's (default: "
                                                               "streaming.query_name, -replay for a replay).")
                     ] = None,
    output_suffix: Annotated[str | None, typer.Option(
        "--output-suffix", help="Write the analyzed records and dead letters to <topic>.<suffix> instead.")
                             ] = None,
    params: Annotated[list[str] | None, typer.Option(
        "--param", help="NAME=VALUE overriding the pipeline's params for this run (repeatable).")] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Replay: discard its checkpoint first.")] = False,
    max_offsets: Annotated[int | None, typer.Option(
        "--max-offsets-per-trigger", help="Records per micro-batch (default: the pipeline's).")] = None,
    version: Annotated[int | None, VERSION_OPTION] = None,
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Run a pipeline's streaming job on the engine: live until SIGTERM, or replay a range.

    The run writes view version --version (default: the current one): its Redis prefix, its
    outputs and, live, its query; --prefix, --query and --output-suffix override the names.
    """
    from jobs.config.load import load_config
    from jobs.engine.run import SINKS, PipelineRun, run_pipeline
    from jobs.streaming.cli import check_run_options, parse_bound

    check_run_options(mode, to, max_offsets)
    chosen = frozenset(part.strip() for part in sinks.split(",") if part.strip())
    if not chosen or chosen - set(SINKS):
        raise ConfigError(f"--sinks {sinks!r}: choose from {', '.join(SINKS)} (comma-separated)")
    item, _ = _one(name)
    cfg = load_config()
    chosen_version = _version(cfg, item, version)
    spec = PipelineRun(mode=mode, starting=parse_bound(from_, "--from") or "earliest",
                       ending=(parse_bound(to, "--to") or "latest") if mode == "replay" else None,
                       sinks=chosen, prefix=prefix or chosen_version.prefix,
                       query=query or chosen_version.query + ("" if mode == "live" else "-replay"),
                       fresh=fresh, output_suffix=output_suffix or chosen_version.output_suffix,
                       max_offsets_per_trigger=max_offsets,
                       params={**chosen_version.params, **dict(map(_param, params or []))})
    from jobs.host.processes import register_process

    with register_process(cfg, process_name(name, chosen_version.number)):
        report = run_pipeline(cfg, item, spec, progress=lambda line: typer.echo(line, err=True))
    if as_json:
        typer.echo(json.dumps(report))
        return
    typer.echo(f"pipeline {name}, query {report['query']} ({mode}): {report['batches']} batches, "
               f"{report['input_rows']} records read, {report['valid_rows']} valid, {report['dlq_rows']} "
               f"dead-lettered, {report['late_rows']} late, in {report['duration_s']:.1f} s")


@pipelines_app.command("view")
def view(
    name: Annotated[str, typer.Argument(help="The pipeline's name.")],
    *,
    view_name: Annotated[str, typer.Argument(metavar="VIEW", help="One of the pipeline's views.")],
    key: Annotated[str | None, typer.Option("--key", help="The key (entity and latest views).")] = None,
    window: Annotated[int | None, typer.Option("--window", help="Window start, epoch ms (default: the "
                                                                 "latest).")] = None,
    prefix: Annotated[str | None, typer.Option("--prefix", help="Redis prefix (default: the version's).")
                      ] = None,
    version: Annotated[int | None, VERSION_OPTION] = None,
) -> None:
    """Read one view of a pipeline from Redis (JSON), of the current view version by default."""
    from jobs.config.load import load_config
    from jobs.engine.reads import ViewReadError, read_view
    from jobs.streaming.redis_sink import connect

    item, _ = _one(name)
    if item.spec is None:
        raise ConfigError(f"pipeline {name}: {item.problems[0]}")
    if view_name not in item.spec.views:
        raise ConfigError(f"pipeline {name} has no view {view_name!r}; its views: "
                          f"{', '.join(sorted(item.spec.views))}")
    cfg = load_config()
    client = connect(cfg)
    try:
        chosen = prefix or _version(cfg, item, version).prefix
        typer.echo(json.dumps(read_view(client, chosen, view_name,
                                        item.spec.views[view_name], key=key, window=window)))
    except ViewReadError as exc:
        raise ConfigError(str(exc)) from None
    finally:
        client.close()


@pipelines_app.command("produce")
def produce(
    name: Annotated[str, typer.Argument(help="The pipeline's name.")],
    file: Annotated[str, typer.Argument(help="A file of one record per line, or - for stdin.")] = "-",
    as_json: Annotated[bool, JSON_OPTION] = False,
) -> None:
    """Send lines to a pipeline's source topic as records (key: the line's ``source.key`` field)."""
    import sys

    from confluent_kafka import Producer

    from jobs.config.load import load_config
    from jobs.engine.run import ensure_topics
    from jobs.kafka.client import producer_config

    item, _ = _one(name)
    if item.spec is None:
        raise ConfigError(f"pipeline {name}: {item.problems[0]}")
    cfg = load_config()
    ensure_topics(cfg, item.spec)
    key_field, topic = item.spec.source.key, item.spec.source.topic
    producer = Producer(producer_config(cfg.kafka.client_config()))
    sent = unkeyed = 0
    try:
        lines = sys.stdin if file == "-" else open(file, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc.strerror}; give a readable file or - for stdin"
                          ) from None
    with lines:
        for line in lines:
            value = line.rstrip("\n")
            if not value:
                continue
            key = _key_of(value, key_field)
            unkeyed += key is None
            producer.produce(topic, value.encode(), key)
            sent += 1
            if not sent % 10_000:
                producer.poll(0)
                typer.echo(f"{sent} records sent", err=True)
    left = producer.flush(60)
    if left:
        raise ConfigError(f"{left} of {sent} record(s) not acknowledged by Kafka in 60 s; check the brokers "
                          "(kappa doctor) and send the file again (the pipeline's parse sees duplicates)")
    result = {"pipeline": name, "topic": topic, "records": sent, "without_key": unkeyed}
    typer.echo(json.dumps(result) if as_json else
               f"{sent} records sent to {topic} ({unkeyed} without the key field {key_field})")


def _key_of(value: str, field: str | None) -> bytes | None:
    """The Kafka key of a line: its JSON object's ``field`` (None when absent or not JSON)."""
    if field is None:
        return None
    try:
        data = json.loads(value)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get(field) is None:
        return None
    return str(data[field]).encode()
