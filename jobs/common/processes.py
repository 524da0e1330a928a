"""Process helpers for the embedded stack: ports, liveness, stopping a process group."""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from pathlib import Path

logger = logging.getLogger(__name__)

STOP_GRACE_S = 30.0


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
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def reap(pid: int) -> None:
    """Collect the exit status of a child of ours, if it is one."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
