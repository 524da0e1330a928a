"""The task layer of the DAGs the factory (dags/pipeline_factory.py) generates for each engine pipeline.

Each task runs what an operator runs: ``kappa pipelines status | load | gold | reconcile NAME``
as a subprocess of the task (its environment, so its ``KAPPA_*``), and the live run
``kappa pipelines run NAME`` started detached through the lifecycle functions of the live job of
``kappa stream`` (:mod:`jobs.orchestration.streaming`: the same lock check, start, health
judgement and stop),
keyed by the query of the pipeline's current view version. Nothing here imports a pipeline's
code or Spark: the commands do, in their own process.

:func:`engine_specs` is what the factory reads at parse time: the ``pipeline.yaml`` files only.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from typing import Any

from jobs.errors import KappaError
from jobs.orchestration import streaming as _streaming
from jobs.orchestration.tasks import no_retry

logger = logging.getLogger(__name__)

STATUS_TIMEOUT_S = 180.0
NO_RETRY = {2: "the pipeline's definition or the command's arguments are wrong",
            6: "the live views drifted from the lake beyond their bounds"}
"""Exit codes of ``kappa`` no retry can change: the task fails at once, with one alert."""
RUNBOOK = "docs/runbooks/pipelines.md"


class PipelineCommandFailed(KappaError):
    """A ``kappa pipelines ...`` command a task ran exited non-zero; the message has its last lines."""

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.returncode = returncode


def engine_specs() -> list[Any]:
    """The valid ``pipeline.yaml`` of every pipeline the engine runs (``streaming.job: engine``).

    Reads the spec files only (no pipeline code, nothing heavy): the DAG factory calls this at
    parse time. A pipeline whose ``pipeline.yaml`` cannot be read or is invalid is left out with
    one warning (``kappa pipelines validate NAME`` says more); so is a second one of the same name.
    """
    from jobs.pipelines.registry import discover, load_spec

    specs: dict[str, Any] = {}
    for folder in discover():
        loaded = load_spec(folder)
        if loaded.spec is None or loaded.problems:
            logger.warning("pipeline %s (%s): no DAGs, its pipeline.yaml is not valid: %s; run "
                           "`kappa pipelines validate`", folder.name, folder, loaded.problems[0])
        elif loaded.spec.name in specs:
            logger.warning("pipeline %s (%s): no DAGs, a pipeline of that name was found first in %s",
                           loaded.name, folder, specs[loaded.name].name)
        elif loaded.spec.streaming.job == "engine":
            specs[loaded.spec.name] = loaded.spec
    return list(specs.values())


def run_pipelines_command(*args: str, timeout_s: float | None = None) -> Any:
    """Run ``kappa pipelines <args>`` (with ``--json``); return its JSON output.

    Its stderr (progress) goes to the task log line by line as it comes. A non-zero exit raises
    :class:`PipelineCommandFailed` with the last lines of stderr; one in :data:`NO_RETRY` fails the
    task at once (:func:`~jobs.orchestration.tasks.no_retry`).
    """
    from jobs.config.load import PROJECT_ROOT

    command = [sys.executable, "-m", "jobs.cli", "pipelines", *args]
    shown = " ".join(["kappa", "pipelines", *args])
    logger.info("running `%s`", shown)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, text=True, cwd=PROJECT_ROOT)
    out: list[str] = []
    reader = threading.Thread(target=_read_all, args=(process.stdout, out), daemon=True)
    reader.start()
    tail: list[str] = []
    timer = threading.Timer(timeout_s, process.kill) if timeout_s else None
    if timer is not None:
        timer.start()
    try:
        for line in process.stderr or []:
            logger.info("%s", line.rstrip())
            tail = [*tail[-4:], line.strip()]
        returncode = process.wait()
        reader.join()
    finally:
        if timer is not None:
            timer.cancel()
    stdout = "".join(out)
    if returncode != 0:
        why = NO_RETRY.get(returncode, "see the task log")
        failure = PipelineCommandFailed(f"`{shown}` exited with {returncode} ({why}): "
                                        f"{' | '.join(line for line in tail if line) or stdout[-500:]}; "
                                        f"see {RUNBOOK}", returncode)
        raise (no_retry(failure) if returncode in NO_RETRY else failure)
    try:
        return json.loads(stdout)
    except ValueError:
        return {"stdout": stdout.strip()}


def _read_all(stream: Any, into: list[str]) -> None:
    into.append(stream.read() if stream is not None else "")


def current_run(name: str) -> dict[str, Any]:
    """``kappa pipelines status NAME``'s row of the current view version (query, pid, last batch, behind)."""
    rows = run_pipelines_command("status", name, "--json", timeout_s=STATUS_TIMEOUT_S)
    current = [row for row in rows if row.get("state") == "current"]
    if len(current) != 1:
        raise KappaError(f"pipeline {name}: `kappa pipelines status {name}` lists {len(current)} current "
                         f"view versions ({rows}); expected one, see {RUNBOOK}")
    return current[0]


def ensure_running(name: str) -> dict[str, Any]:
    """``pipeline_<name>_stream``: start ``kappa pipelines run NAME`` detached unless its query runs.

    The query is the current view version's; its lock (``<checkpoint_root>/<query>.lock``) says
    whether a process runs it. Idempotent: a running query is left alone.
    """
    row = current_run(name)
    report = _streaming.ensure_streaming(query=row["query"], command=("pipelines", "run", name))
    return {"pipeline": name, "version": row["version"], **report}


def check_health(name: str, max_batch_age_s: float, max_offsets_behind: int) -> dict[str, Any]:
    """``pipeline_<name>_stream``: the live run's health from its last batch's metrics.

    A query no process runs fails the task at once (no retries): the next run of the DAG starts it.
    Otherwise judged as ``streaming_lifecycle`` judges ``kappa stream``'s job: only batches emitted since the
    running process started count; records behind: the source's latest offsets less the fence.
    """
    row = current_run(name)
    pid = row.get("pid")
    if not pid or pid < 0:
        raise no_retry(_streaming.StreamingDead(
            f"pipeline {name}: query {row['query']} is not running (no process holds its lock); the next "
            f"run of pipeline_{name}_stream starts it: see {RUNBOOK}"))
    report = _streaming.judge_health(row["query"], pid, row.get("last_batch"), row.get("behind"),
                                     max_batch_age_s=max_batch_age_s, max_offsets_behind=max_offsets_behind,
                                     runbook=RUNBOOK)
    return {"pipeline": name, "version": row["version"], **report}


def stop_running(name: str, timeout_s: float = 300.0) -> dict[str, Any]:
    """``pipeline_<name>_stream`` with ``{"action": "stop"}``: SIGTERM the live run, wait for its lock."""
    row = current_run(name)
    return {"pipeline": name, "version": row["version"],
            **_streaming.stop_streaming(timeout_s, query=row["query"])}


def load(name: str) -> Any:
    """``pipeline_<name>_load``: ``kappa pipelines load NAME`` (its topic-fed tables, exactly once)."""
    return run_pipelines_command("load", name, "--json")


def gold(name: str, day: str) -> Any:
    """``pipeline_<name>_gold``: ``kappa pipelines gold NAME --date DAY`` (the run's data interval date)."""
    return run_pipelines_command("gold", name, "--date", day, "--json")


def reconcile(name: str) -> Any:
    """``pipeline_<name>_reconcile``: ``kappa pipelines reconcile NAME``; a drift (exit 6) fails at once."""
    return run_pipelines_command("reconcile", name, "--json")
