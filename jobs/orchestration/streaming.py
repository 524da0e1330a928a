"""The streaming job's lifecycle as the ``streaming_lifecycle`` DAG drives it.

The job itself holds the guard: ``kappa stream run --mode live`` takes the query's lease in Redis
(``jobs.streaming.lease``, any host) and an exclusive lock on its checkpoint
(``jobs.streaming.state.QueryLock``, this host), so a second copy refuses to start.
``ensure_streaming`` starts that same command detached when no process holds the lock and
waits until one does; ``streaming_health`` reads the job's own metrics from Redis
(``<prefix>:metrics:<query>``, docs/streaming.md), counting only batches emitted after the
running job started, and raises :class:`StreamingDead` when no job runs; ``stop_streaming``
sends SIGTERM, on which the job finishes its current batch and exits. Restarts with
exponential backoff are the DAG's retries (``retry_exponential_backoff``) of
``ensure_streaming``.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.errors import KappaError

if TYPE_CHECKING:
    from jobs.lake.statefs import Location

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 180.0
SETTLE_S = 5.0
LIVE_COMMAND = ("stream", "run", "--mode", "live")
"""The ``kappa`` command of the default pipeline's live job (``streaming.job: kappa-stream``)."""


class StreamingUnhealthy(KappaError):
    """The streaming job runs but its metrics say it is stuck, lagging or failing."""


class StreamingDead(KappaError):
    """No process runs the streaming query: a retry of the health check cannot change that."""


def _query(cfg, query: str | None) -> tuple[str, Location]:
    from jobs.streaming.state import checkpoint_path

    name = query or cfg.streaming.query_name
    return name, checkpoint_path(cfg.lake.checkpoint_root, name)


def running_pid(cfg, query: str | None = None) -> int | None:
    """The pid holding the live query's lock (None when the job does not run)."""
    from jobs.streaming.state import lock_holder

    return lock_holder(_query(cfg, query)[1])


def remote_holder(cfg, query: str | None = None):
    """The lease holder of the query when it is a driver on another host (None otherwise)."""
    from jobs.streaming.lease import host_name, lease_holder

    name, checkpoint = _query(cfg, query)
    holder = lease_holder(cfg, str(checkpoint), name)
    return holder if holder is not None and holder.host != host_name() else None


def service_environment() -> dict[str, str]:
    """The environment of a platform service a task starts: the task's, less the Airflow instance marker.

    ``kappa airflow down`` sweeps every process that carries the marker (tasks' leftovers); the
    streaming job is the platform's, not Airflow's, and outlives ``airflow down``
    (docs/runbooks/airflow.md); ``kappa stack down`` or the DAG's ``stop`` stops it.
    """
    from jobs.orchestration.settings import INSTANCE_MARKER

    return {key: value for key, value in os.environ.items() if key != INSTANCE_MARKER}


def ensure_streaming(query: str | None = None, command: Sequence[str] | None = None) -> dict[str, Any]:
    """Start ``kappa stream run --mode live`` if no process holds the query's lock; idempotent.

    ``command``: the ``kappa`` command that runs ``query`` live instead (e.g. ``pipelines run
    NAME``, whose query is the pipeline's current view version's).
    """
    from jobs.config.load import load_config

    cfg = load_config()
    name, _ = _query(cfg, query)
    pid = running_pid(cfg, name)
    if pid:
        logger.info("streaming query=%s already runs pid=%d", name, pid)
        return {"query": name, "pid": pid, "started": False}
    holder = remote_holder(cfg, name)
    if holder is not None:   # its lease: a driver on another host (or one that died there)
        logger.info("streaming query=%s already runs host=%s pid=%d", name, holder.host, holder.pid)
        return {"query": name, "pid": holder.pid, "host": holder.host, "started": False}
    args = ["--query", query] if query and command is None else []
    pid, log = start_live(cfg, name, args, command=LIVE_COMMAND if command is None else command)
    return {"query": name, "pid": pid, "started": True, "log": str(log)}


def start_live(cfg, name: str, args: list[str], nice: int = 0,
               command: Sequence[str] = LIVE_COMMAND) -> tuple[int, Path]:
    """Start ``kappa stream run --mode live <args>`` detached; its pid and log once it holds the lock.

    The lock is query ``name``'s. Its own session and no Airflow instance marker: the job outlives
    its caller (a DAG task, ``kappa reprocess start``) and ``kappa airflow down``. ``nice``: its
    CPU priority (``nice -n``, inherited by its JVM and Python workers). ``command``: the ``kappa``
    command that runs the query live (``args`` follow it). Its log: ``<data_dir>/logs/stream-<name>.log``.
    """
    from jobs.config.load import PROJECT_ROOT

    log = Path(cfg.stack.data_dir) / "logs" / f"stream-{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    kappa = ["jobs.cli", *command, *args]
    command = [sys.executable, "-m", *kappa]
    if nice and shutil.which("nice"):
        command = ["nice", "-n", str(nice), *command]
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True, cwd=PROJECT_ROOT, env=service_environment())
    logger.info("streaming query=%s starting pid=%d log=%s", name, process.pid, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
            raise KappaError(f"`{' '.join(kappa)}` exited with {process.returncode} during start: "
                             f"{tail} (see {log})")
        if running_pid(cfg, name) == process.pid:
            time.sleep(SETTLE_S)
            if process.poll() is None:
                return process.pid, log
        time.sleep(0.5)
    raise KappaError(f"streaming query {name} did not take its lock within {START_TIMEOUT_S:.0f}s; "
                     f"see {log}")


def streaming_health(max_batch_age_s: float, max_offsets_behind: int, query: str | None = None) -> dict:
    """Health of the running job, judged on its own batches; raise if dead or unhealthy.

    Dead (no process holds the query's lock) raises :class:`StreamingDead` at once: the next
    run of ``streaming_lifecycle`` starts the job again. Metrics emitted before the running job
    started are an earlier job's and never count: until its first batch, the job's age stands
    for the age of its last batch.
    """
    import redis

    from jobs.config.load import load_config

    cfg = load_config()
    name, _ = _query(cfg, query)
    pid = running_pid(cfg, name)
    if pid is None or pid < 0:
        raise StreamingDead(f"streaming query {name} is not running (no process holds its lock); "
                            "the next run of streaming_lifecycle starts it: see "
                            "docs/runbooks/streaming-down.md")
    client = redis.Redis(**cfg.redis.client_kwargs(), decode_responses=True)
    try:
        metrics = client.hgetall(f"{cfg.streaming.redis_prefix}:metrics:{name}")
    finally:
        client.close()
    return judge_health(name, pid, metrics, int(metrics.get("offsets_behind_latest", 0) or 0),
                        max_batch_age_s=max_batch_age_s, max_offsets_behind=max_offsets_behind)


def judge_health(name: str, pid: int, last_batch: Mapping[Any, Any] | None, behind: int | None, *,
                 max_batch_age_s: float, max_offsets_behind: int,
                 runbook: str = "docs/runbooks/streaming-down.md") -> dict[str, Any]:
    """Judge a running job (``pid``) on its last batch's metrics (``emitted_ms``, ``batch_id``).

    A batch emitted before the job started is an earlier job's and does not count (nor does
    ``behind`` then): until its first batch, the job's age stands for the batch age. Raises
    :class:`StreamingUnhealthy` beyond the limits; returns the report otherwise.
    """
    from jobs.host.processes import started_at

    now = time.time()
    started = started_at(pid) or now
    emitted_s = int((last_batch or {}).get("emitted_ms", 0) or 0) / 1000
    own = bool(last_batch) and emitted_s >= started
    behind = (behind or 0) if own else 0
    report = {"query": name, "pid": pid, "job_started_s_ago": round(now - started, 1),
              "batch_id": (last_batch or {}).get("batch_id") if own else None,
              "last_batch_age_s": round(now - emitted_s, 1) if own else None,
              "offsets_behind_latest": behind if own else None}
    age = now - (emitted_s if own else started)
    if age > max_batch_age_s or behind > max_offsets_behind:
        what = "" if own else "no batch since the job started; "
        raise StreamingUnhealthy(f"streaming unhealthy: {what}{report} (limits: age {max_batch_age_s}s, "
                                 f"behind {max_offsets_behind}); see {runbook}")
    return report


def stop_streaming(timeout_s: float = 300.0, query: str | None = None) -> dict[str, Any]:
    """SIGTERM the job (it stops after the current batch); wait until it released its lock."""
    from jobs.config.load import load_config

    cfg = load_config()
    name, _ = _query(cfg, query)
    pid = running_pid(cfg, name)
    if not pid or pid < 0:
        return {"query": name, "stopped": False, "reason": "not running"}
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and running_pid(cfg, name):
        time.sleep(1.0)
    if running_pid(cfg, name):
        raise KappaError(f"streaming query {name} (pid {pid}) still runs {timeout_s:.0f}s after SIGTERM; "
                         "its batch may be stuck: see docs/runbooks/streaming-down.md")
    return {"query": name, "stopped": True, "pid": pid}


def alert(context: dict[str, Any]) -> None:
    """The one alert callback of every DAG (``on_failure_callback``).

    Logs at ERROR and publishes ``{"kind": "airflow_task_failure", ...}`` to ``platform.errors``
    (keyed by DAG id), where the platform's other exceptions go; wire a pager to that topic.
    """
    import json

    ti = context.get("ti") or context.get("task_instance")
    event = {"schema_version": 1, "kind": "airflow_task_failure",
             "dag_id": getattr(ti, "dag_id", None), "task_id": getattr(ti, "task_id", None),
             "run_id": getattr(ti, "run_id", None), "try_number": getattr(ti, "try_number", None),
             "error": str(context.get("exception")), "emitted_ms": int(time.time() * 1000)}
    logger.error("alert %s", json.dumps(event))
    try:
        from confluent_kafka import Producer

        from jobs.config.load import load_config

        cfg = load_config()
        producer = Producer(cfg.kafka.client_config())
        producer.produce(cfg.streaming.errors_topic, json.dumps(event).encode(),
                         key=str(event["dag_id"]).encode())
        producer.flush(10)
    except Exception:  # an alert must never hide the failure it reports
        logger.exception("alert could not be published to Kafka")
