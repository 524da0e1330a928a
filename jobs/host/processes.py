"""Process helpers: ports, liveness, stopping a process group, and the platform's own registry.

The registry holds the platform's long-running processes that feed the broker (the collector,
the streaming job, the data access service), so that ``kappa stack down`` stops them *before*
the broker: the embedded broker loses writes it acknowledges while it shuts down
(docs/runbooks/stack.md). A process registers itself for its lifetime::

    from jobs.host.processes import register_process

    with register_process(cfg, "streaming"):
        run_until_stopped()          # must stop cleanly on SIGTERM (drain, flush, close)

which writes ``<stack.data_dir>/run/<name>.<pid>.pid`` holding its pid and command line and
removes it on exit. :func:`stop_registered` SIGTERMs every registered process whose command
line still matches its file (a recycled pid is never signalled), waits up to a grace period,
then SIGKILLs what is left and removes the files. The registry names this host's processes
only: no job resumes from it, so it stays on local disk (a job's own state lives beside its
checkpoint, jobs/lake/statefs.py).
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobs.config.load import KappaConfig

logger = logging.getLogger(__name__)

STOP_GRACE_S = 30.0
RUN_DIR = "run"
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


@dataclass(frozen=True)
class Registered:
    """One registered process: its name, pid, command line and pidfile."""

    name: str
    pid: int
    cmdline: str
    path: Path


def run_dir(cfg: KappaConfig) -> Path:
    """The folder holding the registry's pidfiles: ``<stack.data_dir>/run``."""
    return Path(cfg.stack.data_dir) / RUN_DIR


@contextmanager
def register_process(cfg: KappaConfig, name: str) -> Iterator[Path]:
    """Register the calling process as ``name`` for the duration of the block.

    Args:
        cfg: the run's config (its ``stack.data_dir`` holds the registry).
        name: a short lowercase name (``collector``, ``streaming``, ``serve``).

    Yields:
        The pidfile written (``<stack.data_dir>/run/<name>.<pid>.pid``).
    """
    if not _NAME.match(name):
        raise ValueError(f"process name {name!r} must match {_NAME.pattern}")
    pid = os.getpid()
    path = run_dir(cfg) / f"{name}.{pid}.pid"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"name": name, "pid": pid, "cmdline": cmdline(pid)}) + "\n")
    logger.info("registered process name=%s pid=%d file=%s", name, pid, path)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def registered(cfg: KappaConfig) -> list[Registered]:
    """Registered processes that still run the command line they registered with.

    Pidfiles of processes that are gone (or whose pid now runs something else) are removed.
    """
    found = []
    for path in sorted(run_dir(cfg).glob("*.pid")):
        try:
            entry = json.loads(path.read_text())
            item = Registered(str(entry["name"]), int(entry["pid"]), str(entry["cmdline"]), path)
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if alive(item.pid) and cmdline(item.pid) == item.cmdline:
            found.append(item)
        else:
            path.unlink(missing_ok=True)
    return found


def stop_registered(cfg: KappaConfig, grace_s: float = STOP_GRACE_S,
                    progress: Callable[[str], None] = logger.info,
                    names: tuple[str, ...] | None = None) -> list[Registered]:
    """SIGTERM every registered process, wait up to ``grace_s``, SIGKILL the rest.

    The calling process is never signalled. Returns the processes that were stopped.
    """
    targets = [item for item in registered(cfg)
               if item.pid != os.getpid() and (names is None or item.name in names)]
    for item in targets:
        progress(f"{item.name}: stopping pid {item.pid} (SIGTERM; it drains before it exits)")
        _signal(item.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(alive(item.pid) for item in targets) and time.monotonic() < deadline:
        for item in targets:
            reap(item.pid)
        time.sleep(0.1)
    for item in targets:
        if alive(item.pid):
            logger.warning("%s pid %d still runs %.0fs after SIGTERM; sending SIGKILL",
                           item.name, item.pid, grace_s)
            _signal(item.pid, signal.SIGKILL)
            _wait_gone(item.pid, 5.0)
        item.path.unlink(missing_ok=True)
        progress(f"{item.name}: stopped pid {item.pid}")
    return targets


def cmdline(pid: int) -> str:
    """The command line of a process, arguments joined by spaces ('' when unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")


def started_at(pid: int) -> float | None:
    """When a process started, in seconds since the epoch (Linux; None when unreadable)."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, IndexError, ValueError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(pid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        reap(pid)
        time.sleep(0.05)


def port_busy(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return True
    return state != "Z"


def stop_group(pid: int, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the process group the service leads, then SIGKILL after a grace period.

    Returns when no process of the group is left (noida-db's wrapper exits before the server
    binary it started has finished writing its data).
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            reap(pid)
            if not group_alive(pid):
                return
            time.sleep(0.1)
        if sig == signal.SIGTERM:
            logger.warning("process group %d still runs %.0fs after SIGTERM; sending SIGKILL", pid, grace_s)


def group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is still in the process group."""
    return _any_alive(2, pgid)


def session_alive(sid: int) -> bool:
    """Whether any non-zombie process is still in the session.

    pyspark's Python worker daemons leave their parent's process group for one of their own,
    never its session.
    """
    return _any_alive(3, sid)


def _any_alive(field: int, value: int) -> bool:
    """Whether a non-zombie process has ``value`` at ``field`` of /proc/<pid>/stat after the name."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[field]) == value and fields[0] != "Z":
            return True
    return False


def reap(pid: int) -> None:
    """Collect the exit status of a child of ours, if it is one."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def lower_priority(pgid: int, nice: int, by_name: Mapping[str, int] | None = None) -> list[str]:
    """Raise the nice of every thread of every process in a process group to ``nice`` (Linux).

    ``by_name``: another nice for threads of that name (``/proc/<pid>/task/<tid>/comm``). A nice
    is only ever raised, never lowered. Best effort: returns what could not be set, for a log
    line. Threads started later inherit the nice of the thread that starts them. Nice weighs
    threads against the others of their autogroup only (autogroup scheduling, on by default in
    many kernels, first shares the CPU evenly between sessions), so a process meant to yield to
    the platform's processes must run in their session: the embedded stack starts its services
    in a process group of their own, not a session of their own.
    """
    problems: list[str] = []
    for pid in (int(e) for e in os.listdir("/proc") if e.isdigit()):
        if _pgid(pid) != pgid:
            continue
        try:
            threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in threads:
            try:
                wanted = (by_name or {}).get(_thread_name(pid, tid), nice)
                os.setpriority(os.PRIO_PROCESS, tid, max(wanted, os.getpriority(os.PRIO_PROCESS, tid)))
            except OSError as exc:
                problems.append(f"thread {tid}: {exc}")
    return problems


def process_group(pid: int) -> int | None:
    """The process group of a process (None when it is gone)."""
    return _pgid(pid)


def listener_pid(port: int, group: int) -> int | None:
    """The pid of the process of process group ``group`` listening on TCP ``port`` (Linux).

    Listening sockets come from /proc/net/tcp{,6} (state 0A), their owner from the socket
    inodes in /proc/<pid>/fd of the group's processes only: never another user's process.
    """
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for pid in sorted(int(e) for e in os.listdir("/proc") if e.isdigit()):
        if _pgid(pid) != group or not alive(pid):
            continue
        if _socket_links(pid) & inodes:
            return pid
    return None


def _socket_links(pid: int) -> set[str]:
    links: set[str] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return links
    for fd in fds:
        try:
            links.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile
            continue
    return links


def _thread_name(pid: int, tid: int) -> str:
    return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()


def _pgid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None
