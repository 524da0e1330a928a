"""Where the Spark service (jobs/spark_service/server.py) says how to reach it, and its code version.

``<stack.data_dir>/run/spark-service.json`` (0600) holds the service's pid, loopback port, the
random key a client proves it knows, and the version of the code it runs; the service also
registers itself as ``spark`` in the platform's process registry (jobs/host/processes.py).
:func:`set_tree_nice` sets the niceness of the service's process tree (the JVM, its Python workers)
for the duration of a request.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from jobs.config.load import PROJECT_ROOT, KappaConfig
from jobs.config.paths import search_paths
from jobs.host.processes import alive, cmdline, run_dir

NAME = "spark"
STATE_FILE = "spark-service.json"
MODULE = "jobs.spark_service.server"


@dataclass(frozen=True)
class ServiceState:
    """What a client needs to reach the service (its state file)."""

    pid: int
    port: int
    authkey: str
    master: str
    code: str
    started_at: float


def state_path(cfg: KappaConfig) -> Path:
    """``<stack.data_dir>/run/spark-service.json``."""
    return run_dir(cfg) / STATE_FILE


def log_path(cfg: KappaConfig) -> Path:
    """``<stack.data_dir>/logs/spark.log``, beside the embedded services' logs."""
    return Path(cfg.stack.data_dir) / "logs" / "spark.log"


def pipeline_roots() -> list[Path]:
    """Where pipelines are looked for: the project's ``pipelines/``, then ``KAPPA_PIPELINES_PATH``."""
    return search_paths()


def code_roots() -> list[Path]:
    """The code a job on the service runs: ``jobs/`` and :func:`pipeline_roots`."""
    return [PROJECT_ROOT / "jobs", *pipeline_roots()]


def code_version(roots: list[Path] | None = None) -> str:
    """A digest of the sources under ``roots`` (default :func:`code_roots`).

    Path, size and mtime of every ``*.py`` and ``*.yaml``: it changes when the engine's code or a
    pipeline's code or definition changes.
    """
    digest = hashlib.sha1()
    for root in roots if roots is not None else code_roots():
        if not root.is_dir():
            continue
        for path in sorted(p for pattern in ("*.py", "*.yaml") for p in root.rglob(pattern)):
            stat = path.stat()
            digest.update(f"{root.name}/{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def write_state(path: Path, state: ServiceState) -> None:
    """Write the state file whole (a temporary file renamed), readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.touch(mode=0o600)
    partial.write_text(json.dumps(state.__dict__) + "\n")
    partial.replace(path)


def read_state(cfg: KappaConfig) -> ServiceState | None:
    """The service's state file, when the process that wrote it still runs the service."""
    try:
        state = ServiceState(**json.loads(state_path(cfg).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    if not alive(state.pid) or MODULE not in cmdline(state.pid):
        return None
    return state


def can_lower_nice() -> bool:
    """Whether this process may lower a niceness (CAP_SYS_NICE or RLIMIT_NICE; Linux).

    Probed on a thread of its own, discarded after: lowering its niceness by one, then back.
    """
    allowed: list[bool] = []

    def probe() -> None:
        tid = threading.get_native_id()
        now = os.getpriority(os.PRIO_PROCESS, tid)
        try:
            os.setpriority(os.PRIO_PROCESS, tid, max(now - 1, -20))
            allowed.append(True)
        except PermissionError:
            allowed.append(False)
        finally:
            os.setpriority(os.PRIO_PROCESS, tid, now)

    thread = threading.Thread(target=probe, name="nice-probe")
    thread.start()
    thread.join()
    return allowed == [True]


def set_tree_nice(root: int, nice: int) -> list[str]:
    """Set every thread of process ``root`` and of its descendants to niceness ``nice`` (Linux).

    Niceness is per thread and a new thread takes its creator's: two passes catch the threads
    started during the first. Best effort: returns what could not be set, for a log line.
    """
    problems: list[str] = []
    for _ in range(2):
        for tid in _tree_threads(root):
            try:
                if os.getpriority(os.PRIO_PROCESS, tid) != nice:
                    os.setpriority(os.PRIO_PROCESS, tid, nice)
            except PermissionError as exc:
                problems.append(f"thread {tid}: {exc}")
            except OSError:
                pass  # a thread that ended meanwhile
    return problems


def _tree_threads(root: int) -> list[int]:
    """The thread ids of process ``root`` and of all its descendants (/proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree = {root}
    while grown := {pid for pid, parent in parents.items() if parent in tree} - tree:
        tree |= grown
    threads: list[int] = []
    for pid in tree:
        try:
            threads += [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
    return threads
