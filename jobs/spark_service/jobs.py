"""What the Spark service runs on request: the project's own entry points, by the op a client sends.

``stream``: a replay or backfill (``jobs.streaming.job.run_stream``); ``load``: a load
(``jobs.loader.load.run_load``); ``batch``: one batch job over its dates
(``jobs.batch.run.run_job``). Each takes the service's session, the client's config and
arguments, a progress callback and a stop event (jobs/spark_service/server.py), and imports its
job only when it runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from jobs.config.load import KappaConfig


def _stream(spark, cfg: KappaConfig, args: dict[str, Any], progress: Callable[[str], None],
            stop: threading.Event) -> Any:
    from jobs.streaming.job import run_stream

    del spark
    return run_stream(cfg, args["spec"], progress=progress, stop=stop)


def _load(spark, cfg: KappaConfig, args: dict[str, Any], progress: Callable[[str], None],
          stop: threading.Event) -> Any:
    from jobs.loader.load import run_load
    from jobs.loader.scale import loader_spark

    del spark, stop
    session = loader_spark(cfg, app_name=args.get("app_name", "kappa-loader"))
    return run_load(session, cfg, args["targets"], args["bound"], progress)


def _batch(spark, cfg: KappaConfig, args: dict[str, Any], progress: Callable[[str], None],
           stop: threading.Event) -> Any:
    from jobs.batch.run import batch_spark, run_job

    del spark, stop
    return run_job(batch_spark(cfg), cfg, args["job"], args["dates"], versions=args.get("versions"),
                   progress=progress, pipeline=args.get("pipeline"))


JOBS: dict[str, Callable[..., Any]] = {"stream": _stream, "load": _load, "batch": _batch}
