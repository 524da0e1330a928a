"""The pipeline whose tables the loader loads: its definition, imported once, when first asked.

``pipelines.default`` in the config names it (or the only pipeline there is). Its code registers
the table specs (``pipeline.tables``) and quality suites (``@pipeline.quality``) the loader uses;
nothing is imported until a load, a quality run or a query needs them, so ``kappa load --help``
stays cheap.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from jobs.config.load import KappaConfig

if TYPE_CHECKING:
    from jobs.pipelines.define import Definitions


def loaded_code(cfg: KappaConfig) -> Definitions:
    """The definition of the configured (or only) pipeline."""
    return _code(cfg.pipelines.default)


@cache
def _code(name: str | None) -> Definitions:
    from jobs.pipelines.registry import resolve

    code = resolve(None, name).code
    assert code is not None  # resolve raises when the code cannot be read
    return code
