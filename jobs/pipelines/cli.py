"""``kappa pipelines list | show NAME | validate [NAME]`` (docs/reference/pipeline-yaml.md)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from jobs.errors import ConfigError

pipelines_app = typer.Typer(no_args_is_help=True, help=(
    "The pipelines on the platform: list them, show one's definition, validate them (a dry run)."))
JSON_OPTION = typer.Option("--json", help="Print machine-readable JSON.")
VERSION_OPTION = typer.Option("--version", help="View version (default: the current one; "
                                                "docs/reference/pipeline-yaml.md, 'View versions').")


def register(app: typer.Typer) -> None:
    """Add ``kappa pipelines`` to the root CLI, with the commands of cli_run, cli_lake, cli_versions."""
    from jobs.pipelines import cli_lake, cli_run, cli_versions

    del cli_lake, cli_run, cli_versions  # their commands register themselves on pipelines_app
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
    return _resolve(name)[1]


def pipeline_hook(name: str | None, key: str):
    """A pipeline's ``pipeline.yaml`` and the function of the file it names with ``key``, or None.

    ``key`` is ``generator``, ``collect`` or ``demo`` (:data:`jobs.pipelines.registry.HOOKS`); only
    that file is imported, not the pipeline's code. The pipeline defaults as in :func:`pipeline_spec`.
    """
    from jobs.pipelines.registry import load_hook

    folder, spec = _resolve(name)
    return spec, load_hook(folder, spec, key)


def _resolve(name: str | None):
    """The folder and the ``pipeline.yaml`` of the pipeline named, or its default."""
    import yaml

    from jobs.config.load import load_config
    from jobs.pipelines.registry import SPEC_FILE, find
    from jobs.pipelines.spec import PipelineSpec

    folder = find(name, load_config().pipelines.default)
    wanted = folder.name
    try:
        spec = PipelineSpec.model_validate(yaml.safe_load((folder / SPEC_FILE).read_text()))
    except Exception as exc:  # a broken definition: one line, the validate command says more
        raise ConfigError(f"pipeline {wanted}: its {SPEC_FILE} is not valid ({type(exc).__name__}); run "
                          f"`kappa pipelines validate {wanted}`") from None
    return folder, spec


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
