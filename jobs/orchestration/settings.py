"""What the local Airflow of ``kappa airflow up`` runs with: its home, ports and environment.

Pure functions of the config (and of the ports chosen at ``up``): the same settings are written
to ``<home>/kappa-airflow.json`` so ``status`` and ``down`` find the instance again.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from jobs.config.load import PROJECT_ROOT, KappaConfig
from jobs.errors import ConfigError
from jobs.orchestration.dagkit import PLUGINS_FOLDER

DAGS_FOLDER = PROJECT_ROOT / "dags"
STATE_FILE = "kappa-airflow.json"
PASSWORDS_FILE = "simple_auth_manager_passwords.json.generated"
INSTANCE_MARKER = "KAPPA_AIRFLOW_INSTANCE"
# Each component runs in its own process group; the api-server first, since it writes the
# admin password file and tasks call its execution API. Airflow's own log servers (started by
# the scheduler and the triggerer) bind every interface with no host setting, so they are
# skipped and one log server of Airflow's app runs on loopback for both (same log folder).
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer", "log-server")
AIRFLOW_COMPONENTS = COMPONENTS[:4]
LOG_SERVER_APP = "airflow.utils.serve_logs.log_server:get_app"
_DRIVERS = {"postgresql": "psycopg2", "postgresql+psycopg2": "psycopg2", "postgresql+psycopg": "psycopg",
            "postgresql+asyncpg": "asyncpg", "mysql+mysqldb": "MySQLdb", "sqlite": "sqlite3"}


@dataclass(frozen=True)
class Ports:
    """The loopback ports of one instance (chosen at ``up`` where the config says 0).

    ``db``: the port of the instance's own PostgreSQL (0: it has none, SQLite or a configured URL).
    """

    api: int
    log: int
    db: int = 0


@dataclass(frozen=True)
class Instance:
    """Everything ``status`` and ``down`` need to find a running instance again."""

    home: str
    url: str
    ports: Ports
    database: str

    def dump(self) -> str:
        """JSON for the state file."""
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def load(cls, text: str) -> Instance:
        """Parse the state file."""
        data = json.loads(text)
        return cls(data["home"], data["url"], Ports(**data["ports"]), data["database"])


def airflow_home(cfg: KappaConfig) -> Path:
    """``airflow.home``, default ``<stack.data_dir>/airflow`` (absolute)."""
    home = cfg.airflow.home or Path(cfg.stack.data_dir) / "airflow"
    return home if home.is_absolute() else PROJECT_ROOT / home


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def choose_ports(cfg: KappaConfig, previous: Ports | None = None, local_db: bool = False) -> Ports:
    """Ports from config; 0 means the port of the previous run if any, else a free one.

    ``local_db``: the instance runs its own PostgreSQL (its port: the previous one, else free).
    """
    air = cfg.airflow

    def pick(wanted: int, before: int | None) -> int:
        return wanted or before or free_port(air.host)

    return Ports(api=pick(air.port, previous.api if previous else None),
                 log=pick(air.log_port, previous.log if previous else None),
                 db=pick(0, previous.db if previous else None) if local_db else 0)


SQLITE_CONNECT_ARGS: dict[str, object] = {"timeout": 60}
"""sqlite3 connect arguments of a local SQLite metadata DB: a 60 s busy wait, not the default 5 s."""


def database_url(cfg: KappaConfig, ports: Ports) -> str:
    """The metadata database URL of an instance.

    ``airflow.sql_alchemy_conn`` if set, else the instance's own PostgreSQL (``ports.db``), else
    (no PostgreSQL can run here) SQLite in the home.
    """
    from jobs.orchestration import postgres

    if cfg.airflow.sql_alchemy_conn is not None:
        return cfg.airflow.sql_alchemy_conn.get_secret_value()
    if ports.db:
        return postgres.url(ports.db)
    return f"sqlite:///{airflow_home(cfg) / 'airflow.db'}"


def check_database_driver(url: str) -> None:
    """Fail before starting anything when the URL's DB-API driver is not installed."""
    import importlib.util

    scheme = url.split("://", 1)[0]
    module = _DRIVERS.get(scheme)
    if module is None:
        raise ConfigError(f"airflow.sql_alchemy_conn: unsupported scheme {scheme!r}; expected one of "
                          f"{sorted(_DRIVERS)} (e.g. postgresql+psycopg2://user:pw@host:5432/airflow)")
    if importlib.util.find_spec(module) is None:
        raise ConfigError(f"airflow.sql_alchemy_conn uses {scheme!r} but its driver {module!r} is not "
                          f"installed in {sys.prefix}; install it there or leave the key unset for "
                          "the instance's own PostgreSQL")


def describe_database(url: str) -> str:
    """The database URL without its password, for status lines."""
    scheme, _, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    return f"{scheme}://{rest}"


def airflow_environment(cfg: KappaConfig, ports: Ports, base: Mapping[str, str]) -> dict[str, str]:
    """The environment of every component: ``base`` (so KAPPA_* reaches tasks) plus Airflow's.

    Task processes are forked by the scheduler's LocalExecutor and inherit this environment,
    so DAG tasks load the same config (KAPPA_ENV and every KAPPA_* override) and talk to the
    same Kafka, Redis and lake as the shell that ran ``kappa airflow up``.
    """
    home = airflow_home(cfg)
    air = cfg.airflow
    url = f"http://{air.host}:{ports.api}"
    env = {key: value for key, value in base.items() if not key.startswith("AIRFLOW__")}
    env.update({
        "KAPPA_ENV": cfg.env,
        "AIRFLOW_HOME": str(home),
        INSTANCE_MARKER: str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PLUGINS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": str(air.parallelism),
        "AIRFLOW__CORE__AUTH_MANAGER":
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{air.admin_user}:admin",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url(cfg, ports),
        "AIRFLOW__API__HOST": air.host,
        "AIRFLOW__API__PORT": str(ports.api),
        "AIRFLOW__API__BASE_URL": url,
        "AIRFLOW__API__WORKERS": str(air.api_workers),
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(ports.log),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(ports.log),
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "jobs.orchestration.settings.loopback_hostname",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "PYTHONPATH": os.pathsep.join(p for p in (str(PROJECT_ROOT), base.get("PYTHONPATH", "")) if p),
    })
    if env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("sqlite"):
        # SQLite serialises writers; sqlite3's default 5 s busy wait is shorter than a scheduler
        # loop on a loaded 2-core machine, and Airflow answers a REST backfill that meets the lock
        # with 503 "Database is locked". Wait instead (PostgreSQL, the default, needs none of this).
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"] = f"{__name__}.SQLITE_CONNECT_ARGS"
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC"] = f"{__name__}.SQLITE_CONNECT_ARGS"
    return env


def component_command(name: str, ports: Ports) -> list[str]:
    """The command line of one component (run with the environment above)."""
    airflow = [sys.executable, "-m", "airflow"]
    if name in ("scheduler", "triggerer"):
        return [*airflow, name, "--skip-serve-logs"]
    if name == "log-server":
        return [sys.executable, "-m", "uvicorn", "--factory", LOG_SERVER_APP, "--host", "127.0.0.1",
                "--port", str(ports.log), "--no-access-log", "--log-level", "warning"]
    return [*airflow, name]


def loopback_hostname() -> str:
    """Airflow's ``hostname_callable``: task hosts are recorded as 127.0.0.1.

    The UI fetches a running task's log from ``http://<hostname>:<worker_log_port>``; every
    component of the local instance runs on this machine, so loopback is the right address.
    """
    return "127.0.0.1"
