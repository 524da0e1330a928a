"""``kappa load`` and the Airflow loads: on the Spark service when it is up, else on a Spark of this process.

The service's side of a load is :mod:`jobs.spark_service.jobs`; the choice and the relay of
progress lines, :func:`jobs.spark.attach.run_on_service`.
"""

from __future__ import annotations

from collections.abc import Callable

from jobs.config.load import KappaConfig
from jobs.spark.attach import COLD, run_on_service


def run_load(cfg: KappaConfig, chosen: list, bound, progress: Callable[[str], None],
             app_name: str = "kappa-loader") -> list:
    """``jobs.loader.load.run_load`` on the service when it is up, else on a Spark of this process."""
    from jobs.loader.load import run_load as run_here
    from jobs.loader.scale import loader_spark, worker_conf

    result = run_on_service(cfg, "load", {"targets": chosen, "bound": bound, "app_name": app_name,
                                          "extra_conf": worker_conf(cfg)}, progress)
    if result is not COLD:
        return result
    return run_here(loader_spark(cfg, app_name=app_name), cfg, chosen, bound, progress)
