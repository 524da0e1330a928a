"""``kappa pipelines list | show NAME | validate [NAME]`` (docs/reference/pipeline-yaml.md)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from jobs.common.errors import ConfigError

pipelines_app = typer.Typer(no_args_is_help=True, help=(
    "The pipelines on the platform: list them, show one's definition, validate them (a dry run)."))
JSON_OPTION = typer.Option("--json", help="Print machine-readable JSON.")


def register(app: typer.Typer) -> None:
    """Add ``kappa pipelines`` to the root CLI."""
    app.add_typer(pipelines_app, name="pipelines")


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
