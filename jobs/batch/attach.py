"""``kappa batch run`` and the batch DAGs' tasks: on the Spark service when it is up, else here.

The service's side of a batch job is :mod:`jobs.spark_service.jobs`; the choice and the relay of
progress lines, :func:`jobs.spark.attach.run_on_service`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jobs.config.load import KappaConfig
from jobs.spark.attach import COLD, run_on_service


def run_batch(cfg: KappaConfig, job: str, dates: list, progress: Callable[[str], None], *,
              versions: dict[str, int] | None = None, pipeline: str | None = None) -> Any:
    """``jobs.batch.run.run_job`` of ``pipeline``'s job ``job`` on the service when it is up, else here."""
    result = run_on_service(cfg, "batch", {"job": job, "dates": list(dates), "versions": versions,
                                           "pipeline": pipeline}, progress)
    if result is not COLD:
        return result
    from jobs.batch.run import batch_spark, run_job

    return run_job(batch_spark(cfg), cfg, job, dates, versions=versions, progress=progress,
                   pipeline=pipeline)
