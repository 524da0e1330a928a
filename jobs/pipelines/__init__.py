"""Pipelines on the engine: their definition (``pipeline.yaml`` + code), discovery and validation.

``Definitions``, ``Reject``, ``Source`` and ``definitions`` (what a pipeline's code imports) load on
first use, so reading a ``pipeline.yaml`` (the DAG factory at parse time) imports no pyarrow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.pipelines.define import Definitions, Reject, Source, definitions

__all__ = ["Definitions", "Reject", "Source", "definitions"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from jobs.pipelines import define

        return getattr(define, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
