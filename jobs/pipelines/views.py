"""The view kinds a pipeline declares (docs/reference/pipeline-yaml.md, "Views").

The engine implements each kind once, fenced and versioned; a pipeline only names the kind, the
fields of its analyzed record that the view reads, and the kind's options. A declaration is
checked on its own here (window sizes, options) and against the pipeline's analyzed schema by
:mod:`jobs.pipelines.validate` (every field a view names must exist).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from jobs.config.sections import Section

Where = str | dict[str, str | int | bool | list[str | int]]
"""Which records a view counts: a boolean field of the analyzed record, or ``{field: value}``
(or a list of accepted values) per field, all of which must hold."""


class _View(Section):
    where: Where | None = None
    description: str = ""

    def fields(self) -> set[str]:
        """The analyzed record's fields this view reads."""
        named = {self.where} if isinstance(self.where, str) else set(self.where or {})
        return named | self._own_fields()

    def _own_fields(self) -> set[str]:
        return set()


class _Windowed(_View):
    key: str
    window_s: int = Field(gt=0)
    on_time: bool = True
    """Leave out records the engine marks late (by stream time), as the windowed views do."""
    ttl_s: int = Field(default=172_800, gt=0)

    def _own_fields(self) -> set[str]:
        return {self.key}


class Counter(_View):
    """All-time count per key (one count per element when the field is a list): a sorted set."""

    kind: Literal["counter"]
    key: str
    top_n: int | None = Field(default=None, ge=1)

    def _own_fields(self) -> set[str]:
        return {self.key}


class Tumbling(_Windowed):
    """Count per key in fixed windows: one hash per window, an index of windows."""

    kind: Literal["tumbling"]


class Sliding(_Windowed):
    """Count per key in windows of ``window_s`` every ``slide_s``, built from per-slide buckets."""

    kind: Literal["sliding"]
    slide_s: int = Field(gt=0)
    top_n: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _slides(self) -> Sliding:
        if self.window_s % self.slide_s:
            raise ValueError(f"window_s {self.window_s} is not a multiple of slide_s {self.slide_s}: "
                             "make the window a whole number of slides")
        return self


class EntityField(Section):
    """One field of an entity hash: a count of records, or the sum or greatest of a field."""

    count: bool = False
    sum: str | None = None
    max: str | None = None
    where: Where | None = None
    scale: int = Field(default=0, ge=0, le=9)
    """A ``sum`` is kept in integer units of ``10**-scale`` (2 for cents): exact in any batching."""

    @model_validator(mode="after")
    def _one(self) -> EntityField:
        chosen = [name for name, value in (("count", self.count), ("sum", self.sum), ("max", self.max))
                  if value]
        if len(chosen) != 1:
            raise ValueError(f"an entity field is exactly one of count: true, sum: FIELD or max: FIELD "
                             f"(found {chosen or 'none'})")
        return self


class Entity(_View):
    """A hash per entity key of counts, sums and greatest values."""

    kind: Literal["entity"]
    key: str
    fields_: dict[str, EntityField] = Field(alias="fields", min_length=1)
    ttl_s: int | None = Field(default=None, gt=0)

    def _own_fields(self) -> set[str]:
        named = {self.key}
        for spec in self.fields_.values():
            named |= {name for name in (spec.sum, spec.max) if name}
            named |= {spec.where} if isinstance(spec.where, str) else set(spec.where or {})
        return named


class Distinct(_View):
    """Approximate distinct values of a field (HyperLogLog) per window and/or all time."""

    kind: Literal["distinct"]
    of: str
    window_s: int | None = Field(default=None, gt=0)
    all_time: bool = False
    on_time: bool = True
    ttl_s: int = Field(default=172_800, gt=0)

    @model_validator(mode="after")
    def _some(self) -> Distinct:
        if self.window_s is None and not self.all_time:
            raise ValueError("a distinct view needs window_s, all_time: true, or both")
        return self

    def _own_fields(self) -> set[str]:
        return {self.of}


class Latest(_View):
    """The fields of the latest record per key: a hash per key.

    Latest = the greatest (event time, partition, offset), compared in Redis before a write, so
    every batching of the same records leaves the same record.
    """

    kind: Literal["latest"]
    key: str
    fields_: list[str] = Field(alias="fields", min_length=1)
    ttl_s: int | None = Field(default=None, gt=0)

    def _own_fields(self) -> set[str]:
        return {self.key, *self.fields_}


View = Annotated[Counter | Tumbling | Sliding | Entity | Distinct | Latest, Field(discriminator="kind")]
VIEW_KINDS = ("counter", "tumbling", "sliding", "entity", "distinct", "latest")
