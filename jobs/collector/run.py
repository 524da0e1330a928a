"""Run a collector process: HTTP server and/or one stream pull, progress, clean shutdown.

SIGTERM or SIGINT stops intake (the HTTP server stops accepting, the pull stops reading),
then the pump drains the log to the broker for up to ``drain_timeout_s`` seconds, the producer
is flushed and the log is checkpointed and closed. Whatever is still pending stays in the log
and is produced first on the next start. A file or stdin pull that reached its end waits for
the log to drain, and gives up (:class:`DrainTimeoutError`, exit 1) once the broker has
acknowledged nothing for ``drain_timeout_s`` seconds.

The HTTP socket is bound here, before anything else starts, with ``SO_REUSEADDR`` (a restarted
collector must not wait for the previous one's TIME-WAIT connections); port 0 takes any free port,
and the port bound is the one printed.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from jobs.collector.pull import PullCounts, pull
from jobs.collector.service import Collector, Settings
from jobs.config.load import KappaConfig
from jobs.errors import KappaError

logger = logging.getLogger(__name__)

PROGRESS_S = 5.0
PULL_JOIN_S = 30.0
LISTEN_BACKLOG = 2048


class DrainTimeoutError(KappaError):
    """A pull ended but the broker acknowledged nothing for the drain timeout."""


class PortInUseError(KappaError):
    """The HTTP port is taken by another process."""


def bind_http(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (0 = any free port) with SO_REUSEADDR."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        raise PortInUseError(f"cannot serve HTTP on {host}:{port} ({exc.strerror}); another process "
                             "(a running collector?) uses it: see `kappa collect status`, or pick "
                             "another --port (0 = any free port)") from None
    sock.set_inheritable(True)
    return sock

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Source:
    """A stream to pull: its name (``file``, ``stdin``, ``url``), chunks of lines, stop event."""

    name: str
    chunks: Iterator[list[bytes]]
    stop: threading.Event = field(default_factory=threading.Event)


def pipeline_settings(cfg: KappaConfig, pipeline: str | None, **overrides: Any) -> Settings:
    """A collector's :class:`Settings` for a pipeline (default: ``pipelines.default``, or the only one).

    Its record check and POST path (``/`` + its source topic up to the first dot); for a pipeline
    the engine runs, its source and dead-letter topics. ``overrides``: ``Settings.from_config``'s.
    """
    from dataclasses import replace

    from jobs.pipelines.cli import pipeline_hook
    from jobs.pipelines.structure import keyed_object

    spec, check = pipeline_hook(pipeline, "collect")
    settings = Settings.from_config(cfg, check or keyed_object(spec.source.key), **overrides)
    settings = replace(settings, post_path="/" + spec.source.topic.split(".", 1)[0])
    if spec.streaming.job == "engine":
        settings = replace(settings, topic=overrides.get("topic") or spec.source.topic,
                           dlq_topic=overrides.get("dlq_topic") or spec.outputs.dlq.topic)
    return settings


def run_collector(collector: Collector, serve_http: bool, source: Source | None,
                  progress: Progress, listener: socket.socket | None = None) -> PullCounts:
    """Run until the pull source ends (and the log is drained) or a stop signal arrives.

    Raises:
        DrainTimeoutError: the source ended, and the log did not drain (broker down or stalled).
    """
    settings = collector.settings
    if serve_http and listener is None:
        listener = bind_http(settings.host, settings.port)
    stop = source.stop if source is not None else threading.Event()
    counts = PullCounts()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    reporter = threading.Thread(target=_report, args=(collector, counts, stop, progress),
                                daemon=True, name="collector-progress")
    collector.start()
    reporter.start()
    drained = True
    try:
        if listener is not None:
            _serve(collector, listener, source, counts=counts, stop=stop, progress=progress)
        elif source is not None:
            pull(collector, source.chunks, source.name, stop, counts)
            if not stop.is_set():
                progress(f"{source.name} ended after {counts.read} lines; draining "
                         f"{collector.pending} pending record(s) to the broker")
                drained = _drain(collector, stop, settings.drain_timeout_s)
    finally:
        stop.set()
        collector.stop(settings.drain_timeout_s)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if listener is not None:
            listener.close()
    progress(_summary(collector, counts))
    if not drained and collector.pending:
        raise DrainTimeoutError(
            f"the broker acknowledged nothing for {settings.drain_timeout_s:g}s; {collector.pending} "
            "record(s) stay in the log and are produced when the collector next starts (check "
            "`kappa stack status`, then run `kappa collect` again)")
    return counts


def _drain(collector: Collector, stop: threading.Event, stall_timeout_s: float) -> bool:
    """Wait until the log is empty; False once nothing drained for ``stall_timeout_s``."""
    last_pending, last_progress = collector.pending, time.monotonic()
    while not stop.is_set() and not collector.wait_drained(0.5):
        pending = collector.pending
        if pending < last_pending:
            last_pending, last_progress = pending, time.monotonic()
        elif time.monotonic() - last_progress >= stall_timeout_s:
            return False
    return True


def _serve(collector: Collector, listener: socket.socket, source: Source | None, *, counts: PullCounts,
           stop: threading.Event, progress: Progress) -> None:
    import uvicorn

    from jobs.collector.guard import guarded_protocol
    from jobs.collector.http import build_app

    settings = collector.settings
    server = uvicorn.Server(uvicorn.Config(
        build_app(collector), log_level="warning", access_log=False, lifespan="off",
        timeout_graceful_shutdown=10, http=guarded_protocol(settings.http), backlog=LISTEN_BACKLOG))
    puller = threading.Thread(target=pull, args=(collector, source.chunks, source.name, stop, counts),
                              daemon=True, name="collector-pull") if source is not None else None
    if puller is not None:
        puller.start()
    threading.Thread(target=_stop_server_on, args=(stop, server), daemon=True).start()
    host, port = listener.getsockname()[:2]
    auth = f"bearer token from {settings.http.token_env}" if settings.http.token else "no auth"
    progress(f"collector listening on http://{host}:{port}{settings.post_path} "
             f"(topic {settings.topic}, log {settings.log_path}, {auth})")
    server.run(sockets=[listener])
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

