"""A pipeline's view versions: each a full set of views and outputs, one pointer names the current.

Version N of pipeline P (docs/reference/pipeline-yaml.md, "View versions"):

- its views, keyed state and fence under the Redis prefix ``<redis_prefix>`` (N = 1) or
  ``<redis_prefix>-v<N>``;
- its analyzed and dead-letter topics: the declared names (N = 1) or ``<topic>.v<N>``;
- its query ``<query_name>`` or ``<query_name>-v<N>`` (and that checkpoint);
- its ``params``: the declared ones, with the overrides recorded when the version was built.

The pointer topic is the ``kappa stream`` job's (the compacted ``streaming.views_topic``), with keys of
the pipeline's own scope ``<P>/current`` and ``<P>/version/<N>`` (jobs/views/versions.py): a
promote is one produce that every reader follows. No record means version 1 with the declared
params.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.config.load import KappaConfig
from jobs.pipelines.spec import PipelineSpec
from jobs.views.versions import BUILDING, Views, read_views, record_version, switch_current


@dataclass(frozen=True)
class Version:
    """The names and params of one view version of a pipeline."""

    number: int
    prefix: str
    query: str
    output_suffix: str | None
    params: dict[str, Any]


def scope(spec: PipelineSpec) -> str:
    """The pointer records' key prefix of a pipeline."""
    return f"{spec.name}/"


def pipeline_views(cfg: KappaConfig, spec: PipelineSpec, timeout_s: float = 15.0) -> Views:
    """The pipeline's pointer: its current version and what is recorded of each."""
    return read_views(cfg, timeout_s, scope=scope(spec))


def version(spec: PipelineSpec, number: int, views: Views | None = None) -> Version:
    """Version ``number``'s names, and its params (the declared ones plus its recorded overrides)."""
    if number < 1:
        raise ValueError(f"view version {number}: versions start at 1")
    s = spec.streaming
    overrides = dict((views.versions.get(number, {}) if views else {}).get("params", {}))
    if number == 1:
        return Version(1, s.redis_prefix, s.query_name, None, overrides)
    return Version(number, f"{s.redis_prefix}-v{number}", f"{s.query_name}-v{number}", f"v{number}",
                   overrides)


def record_building(cfg: KappaConfig, spec: PipelineSpec, number: int, params: dict[str, Any]) -> None:
    """Record version ``number`` as being built with ``params`` overrides."""
    record_version(cfg, number, BUILDING, scope=scope(spec), params=params)


def promote(cfg: KappaConfig, spec: PipelineSpec, number: int, views: Views) -> None:
    """Make version ``number`` current (the one readers and the live job follow); keep the previous."""
    details = {v: {"params": info.get("params", {})} for v, info in views.versions.items()}
    switch_current(cfg, number, views.current, scope=scope(spec), details=details)
