"""``kappa pipelines list | show NAME | validate [NAME]`` (docs/reference/pipeline-yaml.md)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from jobs.common.errors import ConfigError

pipelines_app = typer.Typer(no_args_is_help=True, help=(
    "The pipelines on the platform: list them, show one's definition, validate them (a dry run)."))
JSON_OPTION = typer.Option("--json", help="Print machine-readable JSON.")
VERSION_OPTION = typer.Option("--version", help="View version (default: the current one; "
                                                "docs/reference/pipeline-yaml.md, 'View versions').")


def register(app: typer.Typer) -> None:
    """Add ``kappa pipelines`` to the root CLI (with the commands of cli_lake.py, cli_versions.py)."""
    from jobs.pipelines import cli_lake, cli_versions

    del cli_lake, cli_versions  # their commands register themselves on pipelines_app
    app.add_typer(pipelines_app, name="pipelines")


PIPELINE_OPTION = typer.Option("--pipeline", help="The pipeline (default: pipelines.default in the config, "
                                                  "or the only one).")


def engine_pipeline(name: str | None) -> str | None:
    """The pipeline of a command's ``--pipeline`` when the engine runs it, else None.

    None: the pipeline's streaming job is ``kappa stream``'s own, and the command's own code path
    serves it.
    """
    spec = pipeline_spec(name)
    return None if spec.streaming.job == "kappa-stream" else spec.name


def pipeline_spec(name: str | None):
    """The ``pipeline.yaml`` of the pipeline named (default: ``pipelines.default``, or the only one).

    Only the ``pipeline.yaml`` files are read: no pipeline code is imported.
    """
    import yaml

    from jobs.common.config import load_config
    from jobs.pipelines.registry import SPEC_FILE, discover
    from jobs.pipelines.spec import PipelineSpec

    folders = {folder.name: folder for folder in discover()}
    wanted = name or load_config().pipelines.default
    if wanted is None:
        if len(folders) != 1:
            raise ConfigError(f"{len(folders)} pipelines ({', '.join(sorted(folders)) or 'none'}); say "
                              "which with --pipeline NAME or set pipelines.default in the config")
        wanted = next(iter(folders))
    if wanted not in folders:
        raise ConfigError(f"no pipeline {wanted!r}; the pipelines are: "
                          f"{', '.join(sorted(folders)) or 'none'}")
    try:
        spec = PipelineSpec.model_validate(yaml.safe_load((folders[wanted] / SPEC_FILE).read_text()))
    except Exception as exc:  # a broken definition: one line, the validate command says more
        raise ConfigError(f"pipeline {wanted}: its {SPEC_FILE} is not valid ({type(exc).__name__}); run "
                          f"`kappa pipelines validate {wanted}`") from None
    return spec


def _all():
    from jobs.pipelines.registry import discover, load

    return [load(folder) for folder in discover()]


def _one(name: str):
    found = _all()
    chosen = [item for item in found if item.name == name]
    if not chosen:
        raise ConfigError(f"no pipeline {name!r}; the pipelines are: "
                          f"{', '.join(sorted(item.name for item in found)) or 'none'}")
    return chosen[0], found


@pipelines_app.command("list")
def list_(as_json: Annotated[bool, JSON_OPTION] = False) -> None:
    """Every pipeline found: its name, folder, source topic, views and tables."""
    rows = [{"name": item.name, "folder": str(item.folder), "valid": not item.problems,
             "source": item.spec.source.topic if item.spec else None,
             "views": sorted(item.spec.views) if item.spec else [],
             "tables": sorted(item.spec.tables) if item.spec else []} for item in _all()]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    for row in rows:
        state = "" if row["valid"] else " (invalid: `kappa pipelines validate`)"
        typer.echo(f"{row['name']}{state}: source {row['source']}, {len(row['views'])} views, "
                   f"{len(row['tables'])} tables  [{row['folder']}]")


@pipelines_app.command("show")
def show(name: Annotated[str, typer.Argument(help="The pipeline's name.")],
         as_json: Annotated[bool, JSON_OPTION] = False) -> None:
    """One pipeline's whole definition, defaults filled in."""
    item, _ = _one(name)
    if item.spec is None:
        raise ConfigError(f"pipeline {name}: {item.problems[0]}")
    data = item.spec.model_dump(mode="json", by_alias=True)
    if item.code is not None and item.code.analyzed_schema is not None:
        data["analyzed_schema"] = {f.name: str(f.type) for f in item.code.analyzed_schema}
    typer.echo(json.dumps(data, indent=None if as_json else 2))


@pipelines_app.command("validate")
def validate(name: Annotated[str | None, typer.Argument(help="One pipeline (default: all).")] = None,
             as_json: Annotated[bool, JSON_OPTION] = False) -> None:
    """Dry-run the definitions: one line per problem, exit 1 when there is any."""
    from jobs.pipelines.validate import problems

    if name is None:
        found = _all()
        lines = problems(found)
    else:
        _, found = _one(name)
        lines = [line for line in problems(found) if line.startswith(f"pipeline {name}:")
                 or (line.startswith("pipelines ") and name in line.split(":", 1)[0].split(", "))]
    if as_json:
        typer.echo(json.dumps({"pipelines": sorted(i.name for i in found), "problems": lines}))
    else:
        for line in lines:
            typer.echo(line)
        if not lines:
            typer.echo(f"{len(found) if name is None else 1} pipeline(s) valid")
    if lines:
        raise typer.Exit(1)


def process_name(pipeline: str, version_number: int) -> str:
    """The registered name of a pipeline's run of a view version (``kappa pipelines stop``)."""
    return f"pipeline-{pipeline}" + ("" if version_number == 1 else f"-v{version_number}")


def _version(cfg, item, number: int | None):
    """The chosen view version of a pipeline (default: the current one, read from the pointer)."""
    from jobs.engine.versions import pipeline_views, version

    if item.spec is None:
        raise ConfigError(f"pipeline {item.name}: {item.problems[0]}")
    if number is not None and number < 1:
        raise ConfigError(f"--version must be >= 1, got {number}")
    views = pipeline_views(cfg, item.spec)
    return version(item.spec, views.current if number is None else number, views)


def _param(text: str) -> tuple[str, object]:
    name, sep, raw = text.partition("=")
    if not sep or not name.strip():
        raise ConfigError(f"--param {text!r}: give NAME=VALUE, e.g. --param max_speed_kmh=800")
    try:
        value: object = json.loads(raw)
    except ValueError:
        value = raw
    return name.strip(), value


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
    from jobs.common.config import load_config
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
    from jobs.common.processes import register_process

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
    from jobs.common.config import load_config
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

    from jobs.common.config import load_config
    from jobs.common.kafka.client import producer_config
    from jobs.engine.run import ensure_topics

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
