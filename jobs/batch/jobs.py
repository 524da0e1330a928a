"""The batch jobs: what each reads, the pure transform that computes it, where it is written.

A job recomputes whole date partitions of one table from the partitions of the same dates of
its dated sources (and the whole of its undated ones). Source columns are named constants: the
read is the contract, a source column the job does not name is never read.

A pipeline's batch jobs are its gold tables: declared in its ``pipeline.yaml`` (``gold: FN``,
``partition_by``), their transforms and reads registered by its code (``@pipeline.gold(FN,
reads=...)``, jobs/pipelines/define.py), built into jobs by jobs/engine/lake/gold.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from jobs.config.load import KappaConfig
    from jobs.pipelines.registry import Loaded

ALL = "all"   # every job of the pipeline, on the command line


@dataclass(frozen=True)
class Source:
    """One table a job reads.

    Attributes:
        table: ``schema.table``.
        columns: the columns read (Spark DDL).
        date_column: the partition column filtered to the run's dates; None reads every
            partition (a small table joined whole, e.g. dead-letter positions).
    """

    table: str
    columns: str
    date_column: str | None


@dataclass(frozen=True)
class BatchJob:
    """A table recomputed by date partition.

    Attributes:
        name: the job's name on the command line (its gold transform's).
        table: the table it writes (``schema.table``).
        family: the table's schema (``gold``, ``ops``): which of the pipeline's DAGs runs it.
        date_column: the table's partition column (the dates a run replaces).
        sources: what it reads.
        build: the pure transform: source frames (by table) -> the table's rows.
        question: the BI question the table answers (``kappa batch list``, docs/tables.md).
    """

    name: str
    table: str
    family: str
    date_column: str
    sources: tuple[Source, ...]
    build: Callable[[Mapping[str, DataFrame]], DataFrame]
    question: str


def pipeline_definition(pipeline: str | None = None, cfg: KappaConfig | None = None) -> Loaded:
    """Pipeline ``pipeline`` (None: ``pipelines.default`` of ``cfg``, else the only one), loaded whole."""
    from jobs.config.load import load_config
    from jobs.pipelines.registry import resolve

    return resolve(pipeline, (cfg or load_config()).pipelines.default)


def pipeline_jobs(pipeline: str | None = None, cfg: KappaConfig | None = None) -> dict[str, BatchJob]:
    """The pipeline's batch jobs by name, in the order its ``pipeline.yaml`` declares the tables."""
    from jobs.engine.lake.gold import gold_jobs

    loaded = pipeline_definition(pipeline, cfg)
    assert loaded.spec is not None and loaded.code is not None
    return {item.name: item for item in gold_jobs(loaded.spec, loaded.code)}


def chosen_jobs(names: Sequence[str], pipeline: str | None = None,
                cfg: KappaConfig | None = None) -> list[BatchJob]:
    """The pipeline's jobs called ``names`` (``all``: every one).

    ConfigError (exit 2) naming the known ones when a name is unknown.
    """
    jobs = pipeline_jobs(pipeline, cfg)
    wanted = list(jobs) if list(names) == [ALL] else list(names)
    for name in wanted:
        if name not in jobs:
            raise ConfigError(f"unknown batch job {name!r}; known: {', '.join(jobs) or 'none'} "
                              "(kappa batch list)")
    return [jobs[name] for name in wanted]


def job(name: str, pipeline: str | None = None, cfg: KappaConfig | None = None) -> BatchJob:
    """The pipeline's job called ``name`` (as :func:`chosen_jobs`)."""
    return chosen_jobs([name], pipeline, cfg)[0]
