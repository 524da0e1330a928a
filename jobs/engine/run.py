"""``kappa pipelines run``: a pipeline's streaming job, live or as a bounded replay, one code path.

Any pipeline definition runs here: its source topic is read with the platform's Kafka source
(each partition's records of a batch in one task, in offset order), every batch goes through
:class:`~jobs.engine.batch.PipelineBatches`, and the views, keyed state and fence live under the
run's Redis prefix. ``live`` runs until SIGTERM/SIGINT (or ``stop``) and stops after the current
batch; ``replay`` reads ``[starting, ending)`` with ``availableNow`` and returns.

Sinks: ``kafka`` (analyzed records and dead letters) and ``redis`` (the views). A run without
``redis`` keeps its keyed state and fence under a prefix of its own (``<prefix>:run:<query>``),
writes no view, and may start in the middle of the log (the state before its start is folded
from the log, jobs/engine/keyed.py); a run with views must start at or below the fence.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from jobs.config.load import KappaConfig
from jobs.engine.batch import PipelineBatches
from jobs.errors import KappaError
from jobs.kafka.topics import TopicSpec, apply_topics
from jobs.lake import statefs
from jobs.pipelines.registry import Loaded
from jobs.pipelines.spec import PipelineSpec
from jobs.spark.kafka_io import read_options
from jobs.streaming.gaps import check_replay_start
from jobs.streaming.lease import hold_query
from jobs.streaming.redis_script import RedisViewLost
from jobs.streaming.redis_sink import connect
from jobs.streaming.state import checkpoint_path, effects_gone
from jobs.streaming.waiting import stop_on_signals

logger = logging.getLogger(__name__)
SINKS = ("kafka", "redis")


class PipelineRunError(KappaError):
    """A pipeline's query failed; the message carries the reason."""


@dataclass(frozen=True)
class PipelineRun:
    """What to run: live or replay, the range, the sinks, and where (prefix, query)."""

    mode: str = "live"
    starting: Any = "earliest"
    ending: Any = None
    sinks: frozenset[str] = frozenset(SINKS)
    prefix: str | None = None
    """The Redis prefix of the views (default: the pipeline's ``streaming.redis_prefix``)."""
    query: str | None = None
    """The query's name, its checkpoint's (default: ``streaming.query_name``, ``-replay`` for a replay)."""
    fresh: bool = False
    """A replay: drop its checkpoint (and a Kafka-only run's own state) first."""
    output_suffix: str | None = None
    """Write the analyzed records and dead letters to ``<topic>.<suffix>`` (created as declared)."""
    max_offsets_per_trigger: int | None = None
    trigger_s: float | None = None
    params: dict[str, Any] = field(default_factory=dict)
    """Overrides of the pipeline's ``params`` (e.g. a changed threshold for a reprocess)."""


def names(pipeline: Loaded, run: PipelineRun) -> tuple[str, str, str]:
    """(query, view prefix, state prefix) of a run."""
    assert pipeline.spec is not None
    s = pipeline.spec.streaming
    query = run.query or (s.query_name if run.mode == "live" else f"{s.query_name}-replay")
    prefix = run.prefix or s.redis_prefix
    state_prefix = prefix if "redis" in run.sinks else f"{prefix}:run:{query}"
    return query, prefix, state_prefix


def run_pipeline(cfg: KappaConfig, pipeline: Loaded, run: PipelineRun,
                 progress: Callable[[str], None] = logger.info,
                 stop: threading.Event | None = None) -> dict[str, Any]:
    """Run a pipeline's query until stopped (live) or to the end of its range (replay)."""
    spec = pipeline.spec
    if spec is None or pipeline.code is None or pipeline.problems:
        raise PipelineRunError(f"pipeline {pipeline.name} is not valid: {'; '.join(pipeline.problems)}; "
                               "run `kappa pipelines validate`")
    query, prefix, state_prefix = names(pipeline, run)
    checkpoint = checkpoint_path(cfg.lake.checkpoint_root, query)
    ensure_topics(cfg, spec, run.output_suffix)
    hint = f"stop it there first (`kappa pipelines stop {spec.name}` on its host)"
    lease, lock = hold_query(cfg, checkpoint, query, hint)
    client = connect(cfg)
    started = time.monotonic()
    try:
        if run.fresh and run.mode == "replay":   # only once no other driver of the query runs
            statefs.delete_tree(checkpoint)
            if "redis" not in run.sinks:
                for key in client.scan_iter(match=f"{state_prefix}:*", count=1000):
                    client.delete(key)
        batches = PipelineBatches(cfg, spec, str(pipeline.folder), query=query, prefix=state_prefix,
                                  views="redis" in run.sinks, produce="kafka" in run.sinks, client=client,
                                  outputs=(output_topic(spec.outputs.analyzed.topic, run.output_suffix),
                                           output_topic(spec.outputs.dlq.topic, run.output_suffix)))
        batches.lease = lease
        fence = batches.fence()
        if "redis" in run.sinks and not statefs.listdir(checkpoint / "commits"):
            check_replay_start(_with_source(cfg, spec.source.topic), run.starting, fence)
        if effects_gone(checkpoint, bool(fence)):
            raise RedisViewLost(batches.fence_key, f"the checkpoint of query {query} has committed batches")
        batches.fence_seen = bool(fence)
        _query(cfg, pipeline, run, query=query, checkpoint=str(checkpoint), batches=batches,
               progress=progress, stop=stop)
    finally:
        lock.release()
        lease.release()
        client.close()
    return {"pipeline": spec.name, "query": query, "mode": run.mode, "prefix": prefix,
            **batches.report(), "duration_s": round(time.monotonic() - started, 2),
            "checkpoint": str(checkpoint)}


def ensure_topics(cfg: KappaConfig, spec: PipelineSpec, suffix: str | None = None) -> None:
    """Create the pipeline's topics that do not exist yet, as declared (partitions, retention)."""
    declared = dict(spec.topics())
    if suffix:
        outputs = (spec.outputs.analyzed, spec.outputs.dlq)
        declared |= {output_topic(decl.topic, suffix): decl for decl in outputs}
    apply_topics(cfg.kafka, {name: TopicSpec(partitions=decl.partitions, retention_ms=decl.retention_ms)
                             for name, decl in declared.items()})


def output_topic(topic: str, suffix: str | None) -> str:
    """An output topic of a run with ``--output-suffix``."""
    return f"{topic}.{suffix}" if suffix else topic


def _with_source(cfg: KappaConfig, topic: str) -> KappaConfig:
    return cfg.model_copy(update={"streaming": cfg.streaming.model_copy(update={"source_topic": topic})})


def _query(cfg: KappaConfig, pipeline: Loaded, run: PipelineRun, *, query: str, checkpoint: str,
           batches: PipelineBatches, progress: Callable[[str], None],
           stop: threading.Event | None) -> None:
    from jobs.spark.session import build_spark
    from jobs.streaming.job import job_spark_conf

    spec = pipeline.spec
    assert spec is not None
    if run.params:
        spec = spec.model_copy(update={"params": {**spec.params, **run.params}})
        batches.spec = spec
    spark = build_spark(cfg, app_name=f"kappa-pipeline-{query}", extra_conf=job_spark_conf(cfg))
    options = {"maxOffsetsPerTrigger": run.max_offsets_per_trigger or spec.streaming.max_offsets_per_trigger,
               "failOnDataLoss": "true", "startingOffsetsByTimestampStrategy": "latest",
               "emitRanges": "true", "rangeGroups": spark.sparkContext.defaultParallelism,
               "rangeCuts": "false", "prefetchRanges": "false"}
    fmt, opts = read_options(cfg, topics=[spec.source.topic], starting=run.starting, ending=run.ending,
                             stream=True, options=options, checkpoint=checkpoint)
    batches.source = opts
    writer = (spark.readStream.format(fmt).options(**opts).load().writeStream.foreachBatch(batches)
              .queryName(query).option("checkpointLocation", checkpoint))
    trigger_s = run.trigger_s or spec.streaming.trigger_s
    writer = (writer.trigger(availableNow=True) if run.mode == "replay"
              else writer.trigger(processingTime=f"{int(trigger_s * 1000)} milliseconds"))
    progress(f"pipeline {spec.name}: query {query} starting ({run.mode}, checkpoint {checkpoint})")
    running = writer.start()
    with nullcontext(stop) if stop is not None else stop_on_signals() as stopping:
        try:
            while running.isActive and not stopping.is_set():
                running.awaitTermination(1)
        except Exception:  # a failed query raises from awaitTermination; reported below
            pass
        finally:
            if running.isActive:
                running.stop()
    error = running.exception()
    if error is not None:
        if isinstance(batches.failure, KappaError):
            raise batches.failure
        text = str(getattr(error, "desc", None) or error).strip().splitlines()
        first = text[0][:500] if text else str(error)
        raise PipelineRunError(f"pipeline {spec.name}: query {query} failed: {first}; it resumes from its "
                               "checkpoint when started again")
