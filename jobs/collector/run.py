"""Run a collector process: HTTP server and/or one stream pull, progress, clean shutdown.

SIGTERM or SIGINT stops intake (the HTTP server stops accepting, the pull stops reading),
then the pump drains the log to the broker for up to ``DRAIN_TIMEOUT_S`` seconds, the producer
is flushed and the log is checkpointed and closed. Whatever is still pending stays in the log
and is produced first on the next start.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from jobs.collector.pull import PullCounts, pull
from jobs.collector.service import DRAIN_TIMEOUT_S, Collector

logger = logging.getLogger(__name__)

PROGRESS_S = 5.0
PULL_JOIN_S = 30.0

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Source:
    """A stream to pull: its name (``file``, ``stdin``, ``url``), chunks of lines, stop event."""

    name: str
    chunks: Iterator[list[bytes]]
    stop: threading.Event = field(default_factory=threading.Event)


def run_collector(collector: Collector, serve_http: bool, source: Source | None,
                  progress: Progress) -> PullCounts:
    """Run until the pull source ends (and the log is drained) or a stop signal arrives."""
    stop = source.stop if source is not None else threading.Event()
    counts = PullCounts()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    reporter = threading.Thread(target=_report, args=(collector, counts, stop, progress),
                                daemon=True, name="collector-progress")
    collector.start()
    reporter.start()
    try:
        if serve_http:
            _serve(collector, source, counts, stop, progress)
        elif source is not None:
            pull(collector, source.chunks, source.name, stop, counts)
            if not stop.is_set():
                progress(f"{source.name} ended after {counts.read} lines; draining "
                         f"{collector.pending} pending record(s) to the broker")
                while not stop.is_set() and not collector.wait_drained(0.5):
                    continue
    finally:
        stop.set()
        collector.stop(DRAIN_TIMEOUT_S)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    progress(_summary(collector, counts))
    return counts


def _serve(collector: Collector, source: Source | None, counts: PullCounts, stop: threading.Event,
           progress: Progress) -> None:
    import uvicorn

    from jobs.collector.http import build_app

    settings = collector.settings
    server = uvicorn.Server(uvicorn.Config(
        build_app(collector), host=settings.host, port=settings.port, log_level="warning",
        access_log=False, lifespan="off", timeout_graceful_shutdown=10))
    puller = threading.Thread(target=pull, args=(collector, source.chunks, source.name, stop, counts),
                              daemon=True, name="collector-pull") if source is not None else None
    if puller is not None:
        puller.start()
    threading.Thread(target=_stop_server_on, args=(stop, server), daemon=True).start()
    progress(f"collector listening on http://{settings.host}:{settings.port}/rsvps "
             f"(topic {settings.topic}, log {settings.log_path})")
    server.run()
    stop.set()
    if puller is not None:
        puller.join(PULL_JOIN_S)  # let the pull log what it has already read


def _stop_server_on(stop: threading.Event, server) -> None:
    stop.wait()
    server.should_exit = True


def _report(collector: Collector, counts: PullCounts, stop: threading.Event, progress: Progress) -> None:
    while not stop.wait(PROGRESS_S):
        snapshot = collector.snapshot()
        read = f"read {counts.read}, " if counts.read else ""
        broker = "up" if snapshot.value("broker_up") else "DOWN"
        progress(f"{read}accepted {snapshot.value('accepted')} ({snapshot.value('rate:accepted'):.0f}/s), "
                 f"acknowledged {snapshot.value('acknowledged')} "
                 f"({snapshot.value('rate:acknowledged'):.0f}/s), "
                 f"pending {collector.pending}, rejected {snapshot.value('rejected')}, "
                 f"failed {snapshot.value('failed_store'):.0f}, broker {broker}")


def _summary(collector: Collector, counts: PullCounts) -> str:
    state = collector.writer.state
    pulled = (f"pulled {counts.read} lines: {counts.accepted} accepted, {counts.rejected} rejected; "
              if counts.read else "")
    left = (f"{collector.pending} record(s) remain in the log and are produced on next start"
            if collector.pending else "log drained")
    return (f"collector stopped: {pulled}totals accepted {state.totals['accepted']}, acknowledged "
            f"{state.totals['acknowledged']}, rejected {state.totals['rejected']}, failed store "
            f"{state.failed}; {left}")

