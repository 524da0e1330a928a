"""``kappa stream run``: the pipeline's streaming job, live or as a bounded replay, one code path.

``live`` runs with a processing-time trigger until SIGTERM/SIGINT, then stops after the
current batch and returns. ``replay`` reads an explicit range with ``availableNow`` and
``maxOffsetsPerTrigger`` under its own checkpoint and returns a report. Both build the same
:class:`~jobs.streaming.batch.BatchProcessor` over the same pure transforms.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict
from typing import Any

from jobs.config.load import KappaConfig
from jobs.errors import KappaError
from jobs.lake import statefs
from jobs.lake.statefs import Location
from jobs.spark.backends import choose_backends
from jobs.spark.kafka_io import read_options
from jobs.streaming.batch import BatchProcessor
from jobs.streaming.checkpoint import after_failure, corrupt, corrupt_remedy
from jobs.streaming.codec import stream_codec
from jobs.streaming.gaps import check_replay_start
from jobs.streaming.lease import LeaseLost, QueryLease, hold_query
from jobs.streaming.preflight import check_retention
from jobs.streaming.range_check import check_range
from jobs.streaming.redis_script import RedisViewLost
from jobs.streaming.redis_sink import RedisSummarySink
from jobs.streaming.run_spec import KAFKA, REDIS, Report, RunSpec
from jobs.streaming.state import (
    CheckpointError,
    check_fingerprint,
    checkpoint_path,
    effects_gone,
    fingerprint,
    fingerprint_file,
    last_offsets,
)
from jobs.streaming.waiting import stop_on_signals, wait
from jobs.streaming.watch import KafkaWatch, RunStatus

logger = logging.getLogger(__name__)
WORKER_CONF = {"spark.python.daemon.module": "jobs.streaming.daemon"}
"""The executors' Python workers fork from jobs/streaming/daemon.py (the task's modules preloaded)."""
LOCAL_JVM_CONF = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:G1PeriodicGCInterval=2000 "
                                                  "-XX:MaxHeapFreeRatio=30 -XX:MinHeapFreeRatio=10"}
"""A local job whose tasks read their ranges themselves leaves the JVM only planning and scheduling:
its JIT stops at the quick compiler (C1), and its heap gives memory it does not use back (a G1
cycle after 2 s without a collection, then the heap shrunk to 30 % free). Measured on 300k
replays: the JVM's CPU per event halved with C1, most of it C2 compiler threads; the JVM's peak
RSS over four replays in one JVM 346-363 MB against 374-590 (it grew replay by replay) for
0.1-0.2 s more JVM CPU per replay (docs/explanation/streaming-performance.md).
``spark.conf`` can override it."""
LOCAL_CHECKPOINT_CONF = {
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem"}
"""A checkpoint on a local disk is written without Hadoop's checksum files (``.crc`` beside every
offset and commit file): Spark writes each through a temporary file and an atomic rename, so no
torn file is ever visible. Measured on a 300k replay, 4 alternating runs: a batch's offset and
commit log writes (``walCommit`` + ``commitOffsets``) took 115-150 ms with the checksums, 59-107 ms
without (docs/explanation/streaming-performance.md). Other schemes (HDFS, S3) are untouched."""


class StreamJobError(KappaError):
    """The streaming query failed; the message carries Spark's reason."""


class TransientStartFailure(StreamJobError):
    """Spark could not start a Python worker in time (an overloaded host): worth a restart."""


STOP_HINT = "stop it there first (`kappa stream stop` on its host)"
TRANSIENT_ATTEMPTS = 3
TRANSIENT_MARKERS = ("Python worker failed to connect back",
                     "Timed out while waiting for the Python worker to connect back")


def run_stream(cfg: KappaConfig, spec: RunSpec, progress: Callable[[str], None] = logger.info,
               stop: threading.Event | None = None,
               on_query_end: Callable[[], None] | None = None) -> Report:
    """Run the job until stopped (live) or to the end of its range (replay).

    ``on_query_end`` is called once the query has ended, before the wait for the last batch's
    Redis effects (which need no Spark).
    """
    query = spec.query_name(cfg)
    checkpoint = checkpoint_path(cfg.lake.checkpoint_root, query)
    check_range(cfg, spec.starting, spec.ending, replay=spec.mode == "replay")
    lease, lock = hold_query(cfg, checkpoint, query, STOP_HINT)
    if spec.fresh and spec.mode == "replay":   # only once no other driver of the query runs
        try:
            _wipe(checkpoint)
        except BaseException:
            lock.release()
            lease.release()
            raise
    status = RunStatus(cfg, query, spec.mode)
    try:
        status.set("running")
        report = _run(cfg, spec, query, checkpoint, progress=progress, stop=stop, status=status,
                      on_query_end=on_query_end, lease=lease)
        status.set("finished" if spec.mode == "replay" else "stopped",
                   f"{report.batches} batches, {report.records_read} records read")
        return report
    except BaseException as exc:
        status.set("failed", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        status.close()
        lock.release()
        lease.release()


def _run(cfg: KappaConfig, spec: RunSpec, query: str, checkpoint, *, progress: Callable[[str], None],
         stop: threading.Event | None, status: RunStatus,
         on_query_end: Callable[[], None] | None = None, lease: QueryLease | None = None) -> Report:
    from jobs.spark.session import build_spark

    windows = asdict(stream_codec().windows(cfg))
    check_fingerprint(checkpoint, fingerprint([cfg.streaming.source_topic], windows,
                                              sorted(spec.sinks)), query)
    broken = corrupt(checkpoint)
    if broken:
        raise CheckpointError(f"query {query}: its checkpoint is corrupt: {broken}; "
                              f"{corrupt_remedy(query)} (docs/runbooks/checkpoint.md)")
    check_retention(cfg, checkpoint, query, skip=spec.skip_lost, progress=progress)
    sink = _redis_sink(cfg) if REDIS in spec.sinks else None
    if sink is not None and last_offsets(checkpoint) is None:  # a new run starts at spec.starting
        check_replay_start(cfg, spec.starting, sink.fence())
    elif sink is not None:
        check_targets_kept(checkpoint, query, sink, spec.mode)
    spark = build_spark(cfg, app_name=f"kappa-stream-{query}", extra_conf=job_spark_conf(cfg))
    processor = JobBatchProcessor(cfg, query, spec.sinks, checkpoint, sink)
    processor.lease = lease
    watch = KafkaWatch(cfg, status, progress)
    started = time.monotonic()
    try:
        for attempt in range(1, TRANSIENT_ATTEMPTS + 1):
            try:
                processor.recover(progress)
                _run_query(spark, cfg, spec, query, str(checkpoint), processor=processor,
                           progress=progress, stop=stop, watch=watch)
                if on_query_end is not None:
                    on_query_end()
                processor.drain()
                break
            except TransientStartFailure as exc:
                if attempt == TRANSIENT_ATTEMPTS:
                    raise StreamJobError(str(exc)) from None
                progress(f"warning: {exc}; restarting the query from its checkpoint "
                         f"(attempt {attempt + 1} of {TRANSIENT_ATTEMPTS})")
    finally:
        processor.close()
        if sink is not None:
            sink.close()
    totals = processor.totals
    return Report(query=query, mode=spec.mode, batches=totals.batches,
                  records_read=totals.input_rows, valid=totals.valid_rows,
                  dead_lettered=totals.dlq_rows, late=totals.late_rows,
                  written=_written(cfg, spec.sinks, totals),
                  duration_s=round(time.monotonic() - started, 2), checkpoint=str(checkpoint))


def check_targets_kept(checkpoint: Location, query: str, sink: RedisSummarySink, mode: str) -> None:
    """Refuse to resume a query whose Redis effects are gone (the fence lost since it ran).

    A checkpoint with committed batches says their records were applied; without the fence hash
    Redis lost them (:func:`~jobs.streaming.state.effects_gone`). A replay would read nothing and
    exit 0; a live job would count its next records into the emptied Redis as if they were the view.
    """
    if not effects_gone(checkpoint, bool(sink.client.exists(sink.keys.fence))):
        return
    if mode == "live":
        raise RedisViewLost(sink.keys.fence, f"the checkpoint of query {query} has committed batches")
    raise CheckpointError(
        f"query {query}: its checkpoint at {checkpoint} has applied batches but the Redis fence "
        f"{sink.keys.fence} is gone (Redis lost the data since the replay ran); resuming would read "
        "nothing. Run the replay again with --fresh, or rebuild every view with `kappa reprocess "
        "start` (docs/runbooks/redis-lost.md)")


def _written(cfg: KappaConfig, sinks: frozenset[str], totals) -> dict[str, int]:
    """What the run wrote, under the names it wrote them to (the configured topics), per sink."""
    s = cfg.streaming
    written: dict[str, int] = {}
    if KAFKA in sinks:
        written |= {s.analyzed_topic: totals.analyzed_written, s.dlq_topic: totals.dlq_written}
    if REDIS in sinks:
        written["redis_rows"] = totals.applied_rows
        if KAFKA in sinks:
            written[s.summaries_topic] = totals.summaries_written
    return written


class JobBatchProcessor(BatchProcessor):
    """The job's batch processor: summaries go to Kafka only when ``kafka`` is one of the sinks.

    The Redis sink reads its absolute values back after each apply and publishes them to the
    summaries topic; a run without the Kafka sink (``--sinks redis``, e.g. rebuilding a lost
    Redis) writes nothing to Kafka but its metrics and errors.
    """

    def _produce(self, topic: str, key: str, value) -> None:
        if topic == self.cfg.streaming.summaries_topic and KAFKA not in self.sinks:
            return
        super()._produce(topic, key, value)


def job_spark_conf(cfg: KappaConfig) -> dict[str, str]:
    """The job's own Spark settings (``spark.conf`` from the config comes after and wins)."""
    local_ranges = _read_in_tasks(cfg) and cfg.spark.master.startswith("local")
    root = str(cfg.lake.checkpoint_root)
    local_checkpoint = "://" not in root or root.startswith("file:")
    return (WORKER_CONF | (LOCAL_JVM_CONF if local_ranges else {})
            | (LOCAL_CHECKPOINT_CONF if local_checkpoint else {}))


def _read_in_tasks(cfg: KappaConfig) -> bool:
    """Whether the tasks read their offset ranges (``emitRanges``): kafka-py and ``read_in_tasks``."""
    return cfg.streaming.read_in_tasks and choose_backends(cfg).kafka == "python"


def _redis_sink(cfg: KappaConfig) -> RedisSummarySink:
    sink = RedisSummarySink(cfg)
    sink.setup()
    return sink


def _run_query(spark, cfg: KappaConfig, spec: RunSpec, query: str, checkpoint: str, *,
               processor: BatchProcessor, progress: Callable[[str], None],
               stop: threading.Event | None, watch: KafkaWatch) -> None:
    s = cfg.streaming
    options = {"maxOffsetsPerTrigger": spec.max_offsets_per_trigger or s.max_offsets_per_trigger,
               "failOnDataLoss": str(s.fail_on_data_loss and not spec.skip_lost).lower(),
               # a --from time after a partition's last record starts that partition at its end
               "startingOffsetsByTimestampStrategy": "latest"}
    if s.max_records_per_partition:
        options["maxRecordsPerPartition"] = s.max_records_per_partition
    ranges = _read_in_tasks(cfg)
    if ranges:  # the tasks read their ranges themselves: the records never enter the JVM,
        # and each of at most one task per core gets an equal share of the batch's records
        options |= {"emitRanges": "true",
                    "rangeGroups": s.task_slots or spark.sparkContext.defaultParallelism,
                    # each partition's records of a batch in one task, read in offset order: its
                    # stream time runs through them (jobs/streaming/stream_time.py)
                    "rangeCuts": "false",
                    "prefetchRanges": str(s.prefetch_ranges).lower()}
    fmt, opts = read_options(cfg, topics=[s.source_topic], starting=spec.starting,
                             ending=spec.ending, stream=True, options=options, checkpoint=checkpoint)
    processor.source = opts if ranges else None
    source = spark.readStream.format(fmt).options(**opts).load()
    writer = (source.writeStream.foreachBatch(processor).queryName(query)
              .option("checkpointLocation", checkpoint))
    if spec.mode == "replay":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(s.trigger_s * 1000)} milliseconds")
    progress(f"query {query}: starting ({spec.mode}, checkpoint {checkpoint})")
    running = writer.start()
    with nullcontext(stop) if stop is not None else stop_on_signals() as stopping:
        try:
            wait(running, spec.mode, stopping, progress, processor=processor, watch=watch)
        except Exception as exc:  # a failed query raises from awaitTermination
            if running.exception() is None:
                raise
            del exc
        finally:
            if running.isActive:
                running.stop()
    error = running.exception()
    if error is not None:
        text = str(getattr(error, "desc", None) or error)
        if any(marker in text for marker in TRANSIENT_MARKERS):
            raise TransientStartFailure(f"query {query} could not start a Python worker in time "
                                        "(the host is overloaded)")
        if isinstance(processor.failure, (RedisViewLost, LeaseLost)):   # its own message says why
            raise processor.failure
        raise StreamJobError(f"query {query} failed: {_first_line(error)}; "
                             f"{after_failure(query, statefs.location(checkpoint))}")


def _first_line(error: Any) -> str:
    text = str(getattr(error, "desc", None) or error)
    for line in text.splitlines():
        if "KappaError" in line or "Error:" in line:
            return line.strip()[:500]
    return text.strip().splitlines()[0][:500] if text.strip() else repr(error)


def _wipe(checkpoint: Location) -> None:
    statefs.delete_tree(checkpoint)
    statefs.delete(fingerprint_file(checkpoint))
