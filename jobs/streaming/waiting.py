"""The job's loop while its query runs: a progress line per completed batch, the Kafka watch, stops.

A live query stops on SIGTERM/SIGINT (or the caller's event) after its current batch; a replay
runs until Spark ends it at the end of its range.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from jobs.host.signals import stop_signals_to
from jobs.streaming.batch import BatchProcessor
from jobs.streaming.watch import KafkaWatch

logger = logging.getLogger(__name__)
GRACEFUL_STOP_S = 300.0


def wait(running, mode: str, stop: threading.Event, progress: Callable[[str], None], *,
         processor: BatchProcessor, watch: KafkaWatch) -> None:
    """Until the query ends (replay) or a stop is asked for (live); raises a failed background apply."""
    reported = processor.totals.batches
    while running.isActive:
        running.awaitTermination(0.5)
        processor.check()  # a failed background apply fails the run even with no new batch
        reported = _report_batches(processor, reported, progress)
        watch.tick(processor.totals.batches)
        if stop.is_set() and mode == "live":
            progress("stop requested: stopping after the current batch")
            _stop_between_batches(running)
            break
    _report_batches(processor, reported, progress)


def _report_batches(processor: BatchProcessor, reported: int, progress: Callable[[str], None]) -> int:
    """A progress line for the batch the job completed last, if it has not had one; the count."""
    done = processor.totals.batches
    if done != reported:
        progress(batch_line(processor.totals.last_batch))
    return done


def batch_line(metrics: dict[str, Any]) -> str:
    """One completed batch's progress line, from the job's own counts of Kafka records.

    Spark's ``numInputRows`` is not used: it counts the source's rows, which are offset ranges
    when the tasks read their ranges themselves (``streaming.read_in_tasks``), and Spark's
    progress events also come for triggers that found no new data.
    """
    return (f"batch {metrics['batch_id']}: {metrics['input_rows']} records, {metrics['rows_per_s']:.0f} "
            f"records/s, {metrics['dlq_rows']} dead-lettered, {metrics['batch_duration_ms']} ms")


def _stop_between_batches(running) -> None:
    deadline = time.monotonic() + GRACEFUL_STOP_S
    while running.isActive and running.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.05)
    running.stop()


@contextlib.contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGTERM or SIGINT while the block runs (:func:`stop_signals_to`).

    The handlers there before are put back after the block: a process that runs a query among
    other work (a benchmark, a test) keeps its own handling of those signals.
    """
    event = threading.Event()

    def handler(signum, frame) -> None:
        del frame
        logger.info("signal %d: the query stops after its current batch", signum)
        event.set()

    with stop_signals_to(handler):
        yield event
