"""The Spark service's client: run a job on the service when it is up, else say to run it here.

:func:`run_on_service` asks the service (jobs/spark_service/server.py) to run a replay, a load or
a batch job and relays its progress lines and result; when no service is up, it is off
(``KAPPA_SPARK_SERVICE=off``) or it refuses the run (other Spark settings, changed code), it
returns :data:`COLD` and the caller runs the job on a Spark started for its process: the
callers are ``run_stream`` (jobs/streaming/attach.py), ``run_load`` (jobs/loader/attach.py)
and ``run_batch`` (jobs/batch/attach.py).
:func:`choose` tells which one a run would use and why (``kappa doctor``). A live run always
starts its own Spark.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection
from typing import Any

from jobs.config.load import KappaConfig
from jobs.errors import KappaError
from jobs.host.signals import stop_signals_to
from jobs.spark.service_state import ServiceState, pipeline_roots, read_state

logger = logging.getLogger(__name__)

OFF_ENV = "KAPPA_SPARK_SERVICE"
OFF_VALUES = ("off", "0", "false", "no")
COLD = object()
"""What :func:`run_on_service` returns when the run is to start its own Spark."""


class SparkServiceError(KappaError):
    """The Spark service failed the job, or stopped while it ran."""


@dataclass(frozen=True)
class Choice:
    """Which Spark a run uses: the service (``attach``) or a cold local one, and why."""

    attach: bool
    reason: str
    info: dict[str, Any] | None = None


def choose(cfg: KappaConfig, op: str = "stream", extra_conf: dict[str, str] | None = None) -> Choice:
    """Whether a run of ``op`` with ``cfg`` would attach to the service (it is asked), and why."""
    if os.environ.get(OFF_ENV, "").lower() in OFF_VALUES:
        return Choice(False, f"{OFF_ENV}={os.environ[OFF_ENV]}: every run starts its own local Spark")
    state = read_state(cfg)
    if state is None:
        return Choice(False, "no Spark service is up (`kappa spark up` keeps one): each run starts "
                             "a cold local Spark")
    where = f"Spark service pid {state.pid} at 127.0.0.1:{state.port}"
    try:
        with _connect(state) as conn:
            conn.send(("ping", cfg, {"extra_conf": extra_conf or {}}))
            answer = conn.recv()
    except (OSError, EOFError) as exc:
        return Choice(False, f"{where} does not answer ({exc}): each run starts a cold local Spark")
    if answer[0] != "ok":
        return Choice(False, f"{where} refuses: {answer[1]}; each run starts a cold local Spark")
    return Choice(True, f"{where} (master {state.master}, up {time.time() - state.started_at:.0f} s): "
                        "replays, loads and batch jobs attach to it", answer[1])


def run_on_service(cfg: KappaConfig, op: str, args: dict[str, Any],
                   progress: Callable[[str], None]) -> Any:
    """Run ``op`` on the service and return its result; :data:`COLD` when it cannot."""
    if os.environ.get(OFF_ENV, "").lower() in OFF_VALUES:
        logger.info("spark: a cold local Spark (%s=%s)", OFF_ENV, os.environ[OFF_ENV])
        return COLD
    state = read_state(cfg)
    if state is None:
        # the default path says nothing (-v logs it): an operator's error stays one line
        logger.info("spark: a cold local Spark (no Spark service is up; `kappa spark up` keeps one)")
        return COLD
    try:
        conn = _connect(state)
    except OSError as exc:
        progress(f"spark: a cold local Spark (the Spark service pid {state.pid} does not answer: {exc})")
        return COLD
    with conn, _relay_stop(conn):
        conn.send((op, cfg, {**args, "nice": os.getpriority(os.PRIO_PROCESS, 0),  # served at it
                             "search_paths": [str(p) for p in pipeline_roots()]}))
        return _follow(conn, state, progress)


def _follow(conn: Connection, state: ServiceState, progress: Callable[[str], None]) -> Any:
    accepted = False
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            if not accepted:
                progress(f"spark: a cold local Spark (the Spark service pid {state.pid} closed the "
                         "connection)")
                return COLD
            raise SparkServiceError(
                f"the Spark service (pid {state.pid}) went away during the run; the job stopped at a "
                "consistent point: run it again to resume (docs/runbooks/spark.md)") from None
        kind = message[0]
        if kind == "refused":
            progress(f"spark: a cold local Spark (the Spark service refuses: {message[1]})")
            return COLD
        if kind == "accepted":
            accepted = True
            progress(f"spark: attached to the Spark service pid {state.pid} (127.0.0.1:{state.port})")
        elif kind == "progress":
            progress(message[1])
        elif kind == "done":
            return message[1]
        elif kind == "error":
            error = SparkServiceError(message[1])
            error.exit_code = message[2]
            raise error


@contextmanager
def _relay_stop(conn: Connection) -> Iterator[None]:
    """SIGTERM/SIGINT of this process ask the service to stop the job as they would stop it here."""
    def relay(signum, frame) -> None:
        del frame
        logger.info("signal %d: asking the Spark service to stop the job", signum)
        try:
            conn.send(("stop",))
        except OSError:
            pass

    with stop_signals_to(relay):
        yield


def _connect(state: ServiceState) -> Connection:
    return Client(("127.0.0.1", state.port), authkey=bytes.fromhex(state.authkey))
