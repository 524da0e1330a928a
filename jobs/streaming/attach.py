"""``kappa stream run --mode replay`` and the Airflow replays: on the Spark service when it is up, else here.

The service's side of a replay is :mod:`jobs.spark_service.jobs`; the choice and the relay of
progress lines, :func:`jobs.spark.attach.run_on_service`.
"""

from __future__ import annotations

from collections.abc import Callable

from jobs.config.load import KappaConfig
from jobs.spark.attach import COLD, run_on_service


def run_stream(cfg: KappaConfig, spec, progress: Callable[[str], None], release_early: bool = False):
    """``jobs.streaming.job.run_stream``: a replay on the service when it is up, else here.

    The job's modules (and Spark's) are imported only for a run here. ``release_early``: this
    process needs its Spark no more once the query ends (the CLI): it stops while the last
    batch's Redis effects are applied.
    """
    if spec.mode == "replay":
        result = run_on_service(cfg, "stream", {"spec": spec, "query_name": spec.query_name(cfg)},
                                progress)
        if result is not COLD:
            return result
    from jobs.spark.session import release_spark_soon
    from jobs.streaming.job import run_stream as run_here

    return run_here(cfg, spec, progress=progress, on_query_end=release_spark_soon if release_early else None)
