"""The Python side of a pipeline: what its ``code`` file registers (docs/reference/pipeline-yaml.md).

A pipeline's code file makes one :class:`Definitions` and registers its functions on it::

    from jobs.pipelines import Reject, definitions

    pipeline = definitions(__file__)
    pipeline.analyzed_schema = ANALYZED          # pyarrow schema of the analyzed record

    @pipeline.parse                               # bytes (+ key, params) -> record dict, or Reject
    def parse(value, key, params): ...

    @pipeline.analyze                             # record + its key's state -> (analyzed, new state)
    def analyze(record, previous, params): ...

    @pipeline.gold("flags_by_country_daily")      # silver DataFrame -> gold rows, by date
    def flags_by_country_daily(silver): ...

    @pipeline.gold("by_day", reads=(Source("silver.x", "event_date date, n long", "event_date"),
                                    Source("ops.x_dlq", "reason string", None)))
    def by_day(silver, dlq): ...                  # one DataFrame per read, in order

    @pipeline.reconciler                          # (spark, cfg) -> ViewsCheck: views in a key scheme
    def check(spark, cfg): ...                    # of the pipeline's own (jobs/batch/reconcile.py)

    pipeline.tables(*TABLES)                      # the loader's TableSpecs (jobs/loader/tables.py)

    @pipeline.quality("silver.x")                 # cfg -> the table's Rules (jobs/loader/suites.py)
    def silver_suite(cfg): ...

    pipeline.routes(router)                       # a FastAPI APIRouter: kappa serve mounts it at /api/v1

The engine finds the object by its type, so the variable's name is free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from jobs.batch.jobs import Source
from jobs.errors import KappaError

if TYPE_CHECKING:
    from fastapi import APIRouter

    from jobs.loader.suites import Rule
    from jobs.loader.tables import TableSpec
    from jobs.streaming.codec import RecordCodec

Parse = Callable[[bytes, bytes | None, dict[str, Any]], dict[str, Any]]
Analyze = Callable[[dict[str, Any], Any, dict[str, Any]], tuple[dict[str, Any], Any]]
__all__ = ["Definitions", "Reject", "Source", "definitions"]


class Reject(KappaError):
    """A record that goes to the dead-letter topic, with its reason (one of ``reasons``)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


@dataclass
class Definitions:
    """Everything a pipeline's code registers."""

    path: Path
    analyzed_schema: pa.Schema | None = None
    reasons: tuple[str, ...] = ()
    """The dead-letter reasons ``parse`` may give."""
    parse_fn: Parse | None = None
    analyze_fn: Analyze | None = None
    gold_fns: dict[str, Callable[..., Any]] = field(default_factory=dict)
    gold_reads: dict[str, tuple[Source, ...]] = field(default_factory=dict)
    """What each gold transform reads, when not the pipeline's silver table (its dates' partitions)."""
    lake_queries: dict[str, Callable[..., Any]] = field(default_factory=dict)
    reconciler_fn: Callable[..., Any] | None = None
    """Builds the pipeline's own reconcile of views the engine's ``reconcile:`` cannot compare."""
    records: RecordCodec | None = None
    """A ``kappa stream`` pipeline's per-record functions (``streaming.job: kappa-stream``)."""
    table_specs: dict[str, TableSpec] = field(default_factory=dict)
    """The tables ``kappa load`` loads for the pipeline, by name (topics, policies: ``loader.tables``)."""
    quality_fns: dict[str, Callable[[Any], list[Rule]]] = field(default_factory=dict)
    """Each loaded table's quality suite, built from the run's config."""
    routers: list[APIRouter] = field(default_factory=list)
    """Endpoints of the pipeline's own that ``kappa serve`` mounts (:meth:`routes`)."""

    def parse(self, fn: Parse) -> Parse:
        """Register the record parser (decorator)."""
        self.parse_fn = fn
        return fn

    def analyze(self, fn: Analyze) -> Analyze:
        """Register the per-record transform (decorator)."""
        self.analyze_fn = fn
        return fn

    def gold(self, name: str, reads: tuple[Source, ...] = ()
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a gold transform under ``name`` (decorator factory).

        The transform gets one DataFrame per source of ``reads``, in order (default: the
        pipeline's silver table, its analyzed fields); the first line of its docstring is the
        question the table answers (``kappa batch list``).
        """
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.gold_fns[name] = fn
            if reads:
                self.gold_reads[name] = tuple(reads)
            return fn

        return register

    def reconciler(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Register what builds the pipeline's own reconcile (decorator).

        ``fn(spark, cfg)`` returns a :class:`jobs.batch.reconcile.ViewsCheck`: the views as the lake
        recomputes them, where the live ones are read, each kind's bound (``kappa batch reconcile``).
        """
        self.reconciler_fn = fn
        return fn

    def tables(self, *specs: TableSpec) -> None:
        """Register the loader's specs of the pipeline's tables (``kappa load``)."""
        self.table_specs.update((spec.name, spec) for spec in specs)

    def quality(self, table: str) -> Callable[[Callable[[Any], list[Rule]]], Callable[[Any], list[Rule]]]:
        """Register what builds ``table``'s quality suite from the run's config (decorator factory)."""
        def register(fn: Callable[[Any], list[Rule]]) -> Callable[[Any], list[Rule]]:
            self.quality_fns[table] = fn
            return fn

        return register

    def routes(self, router: APIRouter) -> APIRouter:
        """Register REST endpoints of the pipeline's own, read by its code (``kappa serve``).

        The service that follows the pipeline (``pipelines.default``) mounts them under ``/api/v1``
        with its auth, rate limit and error shape, answering 503 while the served view is being
        rebuilt; an endpoint reaches the service's state through ``jobs.serve.rest.service``.
        """
        self.routers.append(router)
        return router

    def lake_query(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a query of the lake that reconcile compares with a view (decorator factory)."""
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.lake_queries[name] = fn
            return fn

        return register


def definitions(code_file: str) -> Definitions:
    """The object a pipeline's code file registers its functions on (``definitions(__file__)``)."""
    return Definitions(Path(code_file).resolve())
