"""``pipeline.yaml``: what a pipeline declares (reference: docs/reference/pipeline-yaml.md).

One frozen, validated model per file; unknown keys are refused. What config cannot say (the
record's parsing and validation, the per-record transform, gold transforms) is Python in the
file ``code`` names, registered with :func:`jobs.pipelines.define.definitions`.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from jobs.config.sections import Section
from jobs.pipelines.views import View

NAME = re.compile(r"^[a-z][a-z0-9_]*$")
RESERVED_VIEW_NAMES = ("fence", "state", "metrics", "run")
"""Redis key names under a pipeline's prefix that the engine writes itself."""
RESERVED_FILTER_NAMES = ("stream", "streams", "type", "last_event_id", "access_token")
"""Query parameters and filter message keys of ``kappa serve``'s own."""
TABLE = re.compile(r"^(bronze|silver|gold|ops)\.[a-z][a-z0-9_]*$")


class TopicDecl(Section):
    """A topic of the pipeline: its name, Kafka key field, partitions and retention."""

    topic: str = Field(min_length=1)
    key: str | None = None
    partitions: int = Field(default=3, ge=1)
    retention_ms: int = Field(default=604_800_000, ge=-1)


class Outputs(Section):
    """The topics the streaming job writes."""

    analyzed: TopicDecl
    dlq: TopicDecl
    summaries: TopicDecl | None = None


class EventTime(Section):
    """Where event time is, and how late and how far ahead a record may be."""

    field: str = "event_time_ms"
    watermark_s: int = Field(default=60, ge=0)
    future_skew_s: int = Field(default=300, ge=0)


class KeyedState(Section):
    """Keyed state: per key of the source topic, decided in Kafka order (one partition per key)."""

    key: str
    ttl_s: int = Field(default=86_400, gt=0)
    """Event time: state older than this, relative to the record, is treated as absent."""


class Streaming(Section):
    """The pipeline's live query: its name, Redis prefix and trigger."""

    query_name: str
    redis_prefix: str
    trigger_s: float = Field(default=1.0, gt=0)
    max_offsets_per_trigger: int = Field(default=100_000, ge=1)
    job: Literal["engine", "kappa-stream"] = "engine"
    """What runs the streaming job: the engine (``kappa pipelines run``), or ``kappa stream`` with
    the record codec the pipeline registers (its views are served under ``/api/v1``)."""


class Table(Section):
    """A Delta table: loaded from a topic (bronze, silver, ops) or built by a gold transform."""

    topic: str | None = None
    quality_policy: Literal["fail", "quarantine"] = "fail"
    dedup_key: list[str] | None = None
    gold: str | None = None
    """The name of a gold transform registered in the pipeline's code."""
    partition_by: str = "event_date"

    @model_validator(mode="after")
    def _one_source(self) -> Table:
        if (self.topic is None) == (self.gold is None):
            raise ValueError("a table is loaded from a topic (topic: NAME) or built by a gold transform "
                             "(gold: NAME), exactly one")
        return self


class StreamFilter(Section):
    """A dimension clients filter ``kappa serve``'s streams by: the record fields holding its values."""

    plural: str
    """Its key in a WebSocket filter message and in the filter a client is told (``colours``)."""
    fields: list[str] = Field(min_length=1)
    """Dotted paths into a record (``items.item``: the ``item`` of each element of ``items``)."""
    description: str = ""


class Serve(Section):
    """What clients of ``kappa serve``'s streams may filter the pipeline's records by."""

    filters: dict[str, StreamFilter] = Field(default_factory=dict)
    """Query parameter (``colour``) -> the dimension it filters by."""

    @field_validator("filters")
    @classmethod
    def _filter_names(cls, filters: dict[str, StreamFilter]) -> dict[str, StreamFilter]:
        names = [*filters, *(flt.plural for flt in filters.values())]
        bad = sorted({name for name in names if not NAME.match(name) or name in RESERVED_FILTER_NAMES})
        if bad:
            raise ValueError(f"filter name(s) {bad}: lower case letters, digits and _, and none of "
                             f"{', '.join(RESERVED_FILTER_NAMES)} (the service's own parameters)")
        if len(set(names)) != len(names):
            raise ValueError(f"filter names and plurals {names} must all differ; rename the twins")
        return filters


class Schedules(Section):
    """When Airflow runs the pipeline's loads and gold jobs."""

    load: str = "*/15 * * * *"
    gold: str = "@daily"


class PipelineSpec(Section):
    """One ``pipeline.yaml``."""

    name: str
    description: str = ""
    code: str = "pipeline.py"
    generator: str | None = None
    """A Python file beside ``pipeline.yaml`` defining ``lines(options)`` for ``kappa generate``
    (:mod:`jobs.pipelines.generate`); None: the pipeline has no generator."""
    collect: str | None = None
    """A Python file beside ``pipeline.yaml`` defining ``check(record)``, what the collector checks
    of a parsed record (:mod:`jobs.pipelines.structure`); None: a JSON object carrying ``source.key``."""
    summaries: str | None = None
    """A Python file beside ``pipeline.yaml`` defining ``read(cfg, view, key, windows, n)``, what
    ``kappa summaries VIEW`` reads of a kappa-stream pipeline's views; None: it has no such command."""
    demo: str | None = None
    """A Python file beside ``pipeline.yaml`` defining ``run(cfg, say)``, what ``kappa demo --pipeline
    NAME`` runs end to end on the embedded stack (its exit code); None: the pipeline has no demo."""
    source: TopicDecl
    outputs: Outputs
    event_time: EventTime = Field(default_factory=EventTime)
    state: KeyedState | None = None
    streaming: Streaming
    params: dict[str, Any] = Field(default_factory=dict)
    views: dict[str, View] = Field(default_factory=dict)
    tables: dict[str, Table] = Field(default_factory=dict)
    reconcile: dict[str, str] = Field(default_factory=dict)
    """View name -> the name of a lake query in the code that recomputes it."""
    schedules: Schedules = Field(default_factory=Schedules)
    serve: Serve = Field(default_factory=Serve)
    """What ``kappa serve`` offers of the pipeline's streams when it follows the pipeline."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.match(value):
            raise ValueError(f"{value!r} is not a pipeline name: lower case letters, digits and _, "
                             "starting with a letter")
        return value

    @field_validator("views")
    @classmethod
    def _view_names(cls, views: dict[str, Any]) -> dict[str, Any]:
        bad = [name for name in views if not NAME.match(name)]
        if bad:
            raise ValueError(f"view name(s) {bad}: lower case letters, digits and _, starting with a letter")
        taken = sorted(set(views) & set(RESERVED_VIEW_NAMES))
        if taken:
            raise ValueError(f"view name(s) {taken}: the engine writes these keys itself "
                             f"({', '.join(RESERVED_VIEW_NAMES)}); choose other names")
        return views

    @field_validator("tables")
    @classmethod
    def _table_names(cls, tables: dict[str, Any]) -> dict[str, Any]:
        bad = [name for name in tables if not TABLE.match(name)]
        if bad:
            raise ValueError(f"table name(s) {bad}: <bronze|silver|gold|ops>.<name>")
        return tables

    def topics(self) -> dict[str, TopicDecl]:
        """Every topic of the pipeline by name."""
        declared = [self.source, self.outputs.analyzed, self.outputs.dlq, self.outputs.summaries]
        return {decl.topic: decl for decl in declared if decl is not None}
