"""Options shared by the ``kappa ... submit`` commands (stream and batch): one definition each."""

from __future__ import annotations

from typing import Annotated

import typer

Master = Annotated[str | None, typer.Option("--master", help="Default: spark.master from conf.")]
DeployMode = Annotated[str, typer.Option("--deploy-mode", help="client or cluster.")]
Python = Annotated[str | None, typer.Option(
    "--python", help="Executors' interpreter (spark.pyspark.python); default this venv's.")]
Conf = Annotated[list[str] | None, typer.Option("--conf", help="Extra KEY=VALUE, repeatable.")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Print the command, run nothing.")]
