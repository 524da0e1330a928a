"""Running the service: in the foreground for ``kappa serve``, or on a thread for tests and benches."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from typing import Any

import uvicorn
from pydantic import SecretStr

from jobs.config.load import KappaConfig
from jobs.errors import KappaError
from jobs.serve.app import build_app
from jobs.serve.guard import Guard

logger = logging.getLogger(__name__)
START_TIMEOUT_S = 30.0


def uvicorn_config(app: Guard, host: str, port: int, log_level: str = "warning",
                   grace_s: float = 5.0) -> uvicorn.Config:
    """Uvicorn settings shared by the CLI and the thread runner."""
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on",
                          access_log=False, timeout_graceful_shutdown=int(grace_s), ws_ping_interval=20,
                          limit_concurrency=app.service.cfg.serve.max_clients + 100)


class _Terminated(Exception):
    """SIGTERM reached the process (uvicorn re-raises it after its graceful shutdown)."""


def _terminated(signum: int, frame: Any) -> None:
    raise _Terminated


def run(cfg: KappaConfig, token: SecretStr | None, host: str, port: int, log_level: str) -> None:
    """Serve in the foreground until SIGINT/SIGTERM (registered: `kappa stack down` stops it first).

    uvicorn shuts down gracefully on SIGTERM, then raises the signal again for the handler that
    was there before it; with the default one the process would die at once and leave its
    pidfile. Here that handler unwinds the stack instead, so the registration is removed.
    """
    from jobs.host.processes import register_process

    app = build_app(cfg, token)
    server = uvicorn.Server(uvicorn_config(app, host, port, log_level))
    app.service.on_start_failed = lambda: setattr(server, "should_exit", True)
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        with register_process(cfg, "serve"):
            server.run()
    except _Terminated:
        logger.info("serve stopped on SIGTERM")
        return
    finally:
        signal.signal(signal.SIGTERM, previous)
    if app.service.start_error is not None:
        raise KappaError(f"kappa serve could not start: {app.service.start_error}")
    if not server.started:
        raise KappaError(f"kappa serve could not start on {host}:{port} (port in use, or Kafka/Redis "
                         "unreachable: see the log above and docs/runbooks/serve.md)")


class ServerThread:
    """The service on a daemon thread with its own event loop (tests, benchmarks)."""

    def __init__(self, cfg: KappaConfig, token: SecretStr | None = None, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.app = build_app(cfg, token)
        self.server = uvicorn.Server(uvicorn_config(self.app, host, port, grace_s=1))
        self.app.service.on_start_failed = lambda: setattr(self.server, "should_exit", True)
        self._thread = threading.Thread(target=self._run, name="kappa-serve", daemon=True)
        self.loop: asyncio.AbstractEventLoop | None = None

    def _run(self) -> None:
        self.loop = loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.server.serve())
        finally:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    def start(self) -> ServerThread:
        """Start and wait until it listens."""
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started and self.app.service.start_error is None:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise KappaError("the serve thread did not start (see its log)")
            time.sleep(0.02)
        if self.app.service.start_error is not None:
            self._thread.join(timeout=15)
            raise KappaError(f"kappa serve could not start: {self.app.service.start_error}")
        return self

    @property
    def url(self) -> str:
        """http://host:port of the listening socket."""
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        """Ask uvicorn to exit and wait for the thread."""
        self.server.should_exit = True
        self._thread.join(timeout=15)
