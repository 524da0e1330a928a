"""CLI commands of the collection tier (placeholder until the collector lands)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Attach ``kappa generate`` and ``kappa collect`` to the root CLI."""
