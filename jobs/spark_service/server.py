"""``kappa spark up``: a local Spark driver that stays up and runs replays, loads and batch jobs on request.

A cold replay or load pays 13-17 s before its first batch (the JVM, the SparkSession, the Python
worker daemon, the Kafka source's planner processes). This service pays that once: it is a Python
driver process holding one SparkSession built by :func:`jobs.spark.session.build_spark` with the
streaming job's settings, and it runs the project's own entry points (``run_stream`` for replays
and backfills, ``run_load`` for loads, ``run_job`` for batch jobs) in its own process for thin
clients (the CLI, the Airflow tasks; jobs/spark/attach.py). Because the job runs in the
process that holds the session, its driver-side design (foreachBatch in the driver, the background
Redis apply thread, the pending file, the report) is the same as in a cold run: nothing in
jobs/streaming or jobs/loader knows which one it runs in. Spark Connect was measured and not used:
foreachBatch runs in a Python process of the server, apart from the client's state
(docs/runbooks/spark.md).

The service listens on 127.0.0.1 (``multiprocessing.connection``, HMAC-authenticated with a
random key in a 0600 state file under ``<stack.data_dir>/run``), registers itself as ``spark``
(jobs/host/processes.py, so ``kappa stack down`` stops it first) and runs one job at a time.
A request carries the client's config; the service refuses one whose Spark settings fixed at the
JVM's start differ from its own, whose code (jobs/ and the pipelines' folders) changed since it
started, or that looks for pipelines elsewhere: the client then runs cold. SIGTERM stops the
running job's query, Spark and the JVM, then the process.

Idle, the service and its tree run at the niceness it was started with (``spark.service_nice``);
for the duration of a request they run at the caller's niceness (the request carries it), so a
replay attached to the service competes for the CPU as the same replay run cold would. Lowering a
niceness needs CAP_SYS_NICE: without it the service serves every request at its own niceness and
says so once in its log and in ``kappa spark status`` (docs/runbooks/spark.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import signal
import threading
import time
from multiprocessing.connection import Connection, Listener
from typing import Any

from jobs.config.load import KappaConfig, load_config
from jobs.errors import KappaError
from jobs.host.processes import register_process
from jobs.spark.service_state import (
    NAME,
    ServiceState,
    can_lower_nice,
    code_version,
    pipeline_roots,
    set_tree_nice,
    state_path,
    write_state,
)
from jobs.spark_service.jobs import JOBS

logger = logging.getLogger(__name__)

APP_NAME = "kappa-spark-service"
STOP_JOBS_S = 60.0


def fixed_settings(cfg: KappaConfig, extra_conf: dict[str, str]) -> dict[str, str]:
    """The Spark settings a run of ``cfg`` asks for (the service compares those fixed at start)."""
    from jobs.spark.session import session_settings

    return session_settings(cfg, extra_conf) | {"spark.master": cfg.spark.master}


def service_conf(cfg: KappaConfig) -> dict[str, str]:
    """The service's own Spark settings: the streaming job's (its worker daemon, JVM, checkpoints)."""
    from jobs.streaming.job import job_spark_conf

    return job_spark_conf(cfg)


class SparkService:
    """The running service: one SparkSession, one job at a time."""

    def __init__(self, cfg: KappaConfig) -> None:
        from jobs.spark.session import build_spark

        self.cfg = cfg
        self.code = code_version()
        self.spark = build_spark(cfg, app_name=APP_NAME, extra_conf=service_conf(cfg))
        self.conf = dict(self.spark.sparkContext.getConf().getAll())
        self.job_lock = threading.Lock()
        self.stopping = threading.Event()
        self.current: dict[str, Any] = {}
        self.idle_nice = os.getpriority(os.PRIO_PROCESS, 0)
        self.follows_caller = can_lower_nice()  # else a niceness raised for a request would stay
        self.nice_note: str | None = None
        if self.idle_nice > 0 and not self.follows_caller:
            self.nice_note = (f"the service cannot lower its niceness (no CAP_SYS_NICE): it runs every "
                              f"request at niceness {self.idle_nice}, below a caller at 0; run it at "
                              "`spark.service_nice: 0` (docs/runbooks/spark.md)")
            logger.warning("%s", self.nice_note)

    def renice(self, nice: int | None) -> None:
        """Run the service's process tree at niceness ``nice`` (None: its idle niceness)."""
        wanted = nice if nice is not None and self.follows_caller else self.idle_nice
        problems = set_tree_nice(os.getpid(), wanted)
        if problems:
            logger.warning("could not set the service's niceness to %d: %s", wanted, "; ".join(problems[:3]))

    def warm_up(self) -> float:
        """Run one tiny streaming query (jobs/spark_service/warmup.py); return its seconds."""
        from jobs.spark_service.warmup import warm_up

        return warm_up(self.spark)

    def refusal(self, cfg: KappaConfig, extra_conf: dict[str, str],
                search_paths: list[str] | None = None) -> str | None:
        """Why a run of ``cfg`` cannot use this service (None: it can).

        ``search_paths``: where the run looks for pipelines (the service must look in the same).
        """
        own = [str(p) for p in pipeline_roots()]
        if search_paths is not None and search_paths != own:
            return (f"the service looks for pipelines in {os.pathsep.join(own)}, this run in "
                    f"{os.pathsep.join(search_paths)} (KAPPA_PIPELINES_PATH)")
        if code_version() != self.code:
            return ("the service runs jobs/ and the pipelines as they were when it started and the code "
                    "changed since: restart it (`kappa spark down && kappa spark up`)")
        differs = {key: (self.conf.get(key), value)
                   for key, value in fixed_settings(cfg, extra_conf).items()
                   if not _same(key, self.conf.get(key), value) and not self.spark.conf.isModifiable(key)}
        if differs:
            listed = ", ".join(f"{key}={str(have)[-80:]!r} (this run: {want[-80:]!r})"
                               for key, (have, want) in sorted(differs.items())[:3])
            return f"the service's Spark was started with other settings fixed at start: {listed}"
        return None

    def handle(self, conn: Connection) -> None:
        """Serve one client: ping, or run one job and send its progress and result."""
        sender = _Sender(conn)
        try:
            op, cfg, args = conn.recv()
            extra = service_conf(cfg) if op == "stream" else dict(args.get("extra_conf") or {})
            reason = "the service is stopping" if self.stopping.is_set() else self.refusal(
                cfg, extra, args.get("search_paths"))
            if reason or op == "ping":
                sender.send(("refused", reason) if reason else ("ok", self.info()))
                return
            if not self.job_lock.acquire(blocking=False):
                sender.send(("progress", "the Spark service runs another job: waiting for it"))
                self.job_lock.acquire()
            try:
                self._run(op, cfg, args, conn, sender)
            finally:
                self.job_lock.release()
        except (EOFError, OSError):
            logger.info("client went away")
        finally:
            conn.close()

    def _run(self, op: str, cfg: KappaConfig, args: dict[str, Any], conn: Connection,
             sender: _Sender) -> None:
        stop = threading.Event()
        self.current = {"op": op, "stop": stop, "query": args.get("query_name")}
        watcher = threading.Thread(target=self._watch, args=(conn, stop), daemon=True)
        watcher.start()
        self.renice(args.get("nice"))
        sender.send(("accepted", self.info()))

        def progress(line: str) -> None:
            sender.send(("progress", line))

        try:
            result = JOBS[op](self.spark, cfg, args, progress, stop)
            if self.stopping.is_set():
                sender.send(("error", "the Spark service was stopped during the run; the job stopped "
                                      "at a consistent point: run it again to resume", 1))
            else:
                sender.send(("done", result))
        except KappaError as exc:
            sender.send(("error", str(exc), exc.exit_code))
        except Exception as exc:  # reported to the client, which exits non-zero; the service goes on
            logger.exception("job %s failed", op)
            sender.send(("error", f"{type(exc).__name__}: {exc}", 1))
        finally:
            self.current = {}
            self.renice(None)

    def _watch(self, conn: Connection, stop: threading.Event) -> None:
        """Relay the client's stop; a client that went away stops its query (nobody awaits it)."""
        try:
            while conn.recv() != ("stop",):
                pass
            stop.set()
        except (EOFError, OSError):
            if self.current.get("stop") is stop:
                stop.set()
                self.stop_queries(self.current.get("query"))

    def stop_queries(self, name: str | None = None) -> None:
        """Stop the active streaming queries (the one named ``name`` when given)."""
        for query in self.spark.streams.active:
            if name is None or query.name == name:
                logger.info("stopping query %s", query.name)
                query.stop()

    def info(self) -> dict[str, Any]:
        """What ``kappa spark status`` shows."""
        return {"pid": os.getpid(), "master": self.cfg.spark.master, "code": self.code,
                "app_id": self.spark.sparkContext.applicationId,
                "running": self.current.get("op"), "idle_nice": self.idle_nice,
                "follows_caller_nice": self.follows_caller,
                "nice_note": self.nice_note}


def _same(key: str, have: str | None, want: str) -> bool:
    """Whether a setting of the running Spark is the one asked for.

    pyspark puts its own JVM options before the ones given (``--add-opens`` ...): the JVM has
    the options asked for when they end its options.
    """
    if key.endswith("extraJavaOptions") and have is not None:
        return have.endswith(want)
    return have == want


class _Sender:
    """Sends to one client from the job's threads (the job, its background apply)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()
        self.gone = False

    def send(self, message: tuple) -> None:
        with self.lock:
            if self.gone:
                return
            try:
                self.conn.send(message)
            except (OSError, ValueError):
                self.gone = True  # the job goes on to a consistent end; the client's watcher stops it


def serve(cfg: KappaConfig, port: int = 0) -> int:
    """Run the service until SIGTERM/SIGINT; return the exit code."""
    from jobs.spark.session import release_spark

    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stopped.set())
    with register_process(cfg, NAME):
        started = time.monotonic()
        service = SparkService(cfg)
        warm_s = service.warm_up()
        authkey = secrets.token_bytes(32)
        listener = Listener(("127.0.0.1", port), authkey=authkey)
        state = ServiceState(os.getpid(), listener.address[1], authkey.hex(), cfg.spark.master,
                             service.code, time.time())
        write_state(state_path(cfg), state)
        logger.warning("spark service ready pid=%d port=%d start_s=%.1f warm_up_s=%.1f",
                       state.pid, state.port, time.monotonic() - started, warm_s)
        threading.Thread(target=_accept, args=(listener, service), daemon=True).start()
        try:
            stopped.wait()
        finally:
            logger.warning("spark service stopping")
            state_path(cfg).unlink(missing_ok=True)
            _shutdown(service, listener)
            release_spark()
    return 0


def _accept(listener: Listener, service: SparkService) -> None:
    while True:
        try:
            conn = listener.accept()
        except OSError:
            return  # closed at shutdown
        except Exception:  # a client without the key (AuthenticationError) or a broken handshake
            logger.warning("refused a connection", exc_info=True)
            continue
        threading.Thread(target=service.handle, args=(conn,), daemon=True).start()


def _shutdown(service: SparkService, listener: Listener) -> None:
    service.stopping.set()
    listener.close()
    running = service.current.get("stop")
    if running is not None:
        running.set()
        service.stop_queries()
    if service.job_lock.acquire(timeout=STOP_JOBS_S):
        service.job_lock.release()


def main(argv: list[str] | None = None) -> int:
    """``python -m jobs.spark_service.server [--port N]`` (what ``kappa spark up`` starts)."""
    parser = argparse.ArgumentParser(prog="jobs.spark_service.server")
    parser.add_argument("--port", type=int, default=0, help="loopback port (0: a free one)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return serve(load_config(), args.port)


if __name__ == "__main__":
    raise SystemExit(main())
