"""A pipeline's gold tables as batch jobs: its gold transforms over its tables, by date partition.

Each table declared with ``gold: FN`` becomes a :class:`~jobs.batch.jobs.BatchJob` named ``FN``
whose sources are what the transform was registered to read (``@pipeline.gold(FN, reads=...)``),
by default the pipeline's silver table (the dates' partitions of one pinned snapshot), and whose
build is the registered transform; jobs/batch/run.py runs it: the dates' partitions of the gold
table are replaced in one commit recording the versions of its sources.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import date
from typing import TYPE_CHECKING, Any

from jobs.batch.jobs import BatchJob, Source
from jobs.config.load import KappaConfig
from jobs.engine.lake.tables import analyzed_struct, ddl, silver_table
from jobs.errors import ConfigError
from jobs.pipelines.define import Definitions
from jobs.pipelines.spec import PipelineSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.batch.run import JobReport


def silver_source(spec: PipelineSpec, code: Definitions, *, by_date: bool = True) -> Source:
    """The silver table as a batch source: the analyzed fields, the engine's and the date column."""
    name, decl = silver_table(spec)
    columns = f"{ddl(analyzed_struct(spec, code))}, `{decl.partition_by}` date"
    return Source(name, columns, decl.partition_by if by_date else None)


def _build(fn: Callable[..., Any],
           sources: Sequence[Source]) -> Callable[[Mapping[str, DataFrame]], DataFrame]:
    def build(frames: Mapping[str, DataFrame]) -> DataFrame:
        return fn(*(frames[source.table] for source in sources))

    return build


def _question(fn: Callable[..., Any]) -> str:
    """The first line of the transform's docstring."""
    lines = (fn.__doc__ or "").strip().splitlines()
    return lines[0].strip() if lines else ""


def gold_jobs(spec: PipelineSpec, code: Definitions, tables: Sequence[str] | None = None) -> list[BatchJob]:
    """The batch jobs of the pipeline's gold tables (all, or ``tables``), in declaration order."""
    declared = {name: decl for name, decl in spec.tables.items() if decl.gold is not None}
    unknown = sorted(set(tables or []) - set(declared))
    if unknown:
        raise ConfigError(f"pipeline {spec.name} builds no gold table(s) {', '.join(unknown)}; it builds: "
                          f"{', '.join(declared) or 'none'}")
    jobs = []
    for name, decl in declared.items():
        if tables and name not in tables:
            continue
        fn = code.gold_fns.get(decl.gold or "")
        if fn is None:
            raise ConfigError(f"pipeline {spec.name}: table {name} is built by gold transform {decl.gold!r}, "
                              f"which its code does not register (registered: "
                              f"{', '.join(code.gold_fns) or 'none'}); add @pipeline.gold({decl.gold!r})")
        sources = code.gold_reads.get(decl.gold or "") or (silver_source(spec, code),)
        jobs.append(BatchJob(decl.gold or "", name, name.split(".", 1)[0], decl.partition_by, sources,
                             _build(fn, sources), _question(fn)))
    return jobs


def run_gold(spark: SparkSession, cfg: KappaConfig, spec: PipelineSpec, code: Definitions, *,
             dates: Sequence[date], tables: Sequence[str] | None = None,
             progress: Callable[[str], None] = lambda line: None) -> list[JobReport]:
    """Replace the ``dates`` partitions of each gold table (one commit per table)."""
    from jobs.batch.run import run_job

    return [run_job(spark, cfg, job, dates, progress=progress) for job in gold_jobs(spec, code, tables)]
