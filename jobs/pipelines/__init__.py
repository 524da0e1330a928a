"""Pipelines on the engine: their definition (``pipeline.yaml`` + code), discovery and validation."""

from jobs.pipelines.define import Definitions, Reject, definitions

__all__ = ["Definitions", "Reject", "definitions"]
