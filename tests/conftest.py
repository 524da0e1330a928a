"""Session fixtures: one embedded stack on free loopback ports, one SparkSession.

Tests never touch 6379/9092/5432 or a developer's `kappa stack up`: ports are picked free,
data lives in a temporary folder, and only processes started here are stopped.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobs.config.load import KappaConfig, load_config

REPO = Path(__file__).resolve().parents[1]

# A pytest-xdist worker's __main__ (execnet) has neither a spec nor a file, which pyspark's
# Connect package (imported by great_expectations) takes for a doctest run and answers with
# sys.exit(0). Name it as the interpreter's own main module would be.
_main = sys.modules["__main__"]
if getattr(_main, "__spec__", None) is None and not hasattr(_main, "__file__"):
    _main.__file__ = "<pytest-xdist worker>"
KAPPA = [sys.executable, "-m", "jobs.cli"]


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (another process may take it before you
    bind it: prefer binding port 0, or start services with :func:`start_stack`, which retries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


STACK_START_ATTEMPTS = 3


def start_stack(config_for: Callable[[int], KappaConfig], attempts: int = STACK_START_ATTEMPTS):
    """Start an embedded stack; when it fails (a port taken meanwhile), try again on new ports.

    ``config_for(attempt)`` returns the config of each attempt (0, 1, ...), with fresh ports from
    attempt 1 on. Returns the started ``EmbeddedStack`` and its config.
    """
    from jobs.errors import StackError
    from jobs.stack.embedded import EmbeddedStack

    for attempt in range(attempts):
        config = config_for(attempt)
        embedded = EmbeddedStack(config)
        try:
            embedded.up(progress=lambda message: None)
        except StackError:
            if attempt == attempts - 1:
                raise
            continue
        return embedded, config
    raise AssertionError("unreachable")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by folder (tests/unit -> unit, tests/integration -> integration, tests/dags ->
    dags), then put the files holding a ``slow`` test first: pytest-xdist hands out whole files
    (``--dist loadfile``) in this order, so the longest start first and the short ones fill the
    workers' ends."""
    for item in items:
        parts = Path(str(item.fspath)).relative_to(REPO / "tests").parts
        if parts[0] in ("unit", "integration", "infra", "dags") and not item.get_closest_marker(parts[0]):
            item.add_marker(getattr(pytest.mark, parts[0]))
    slow_files = {str(item.fspath) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: str(item.fspath) not in slow_files)   # stable: file order kept


@pytest.fixture(scope="session")
def stack_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temporary folder for the session's stack data, lake and checkpoints."""
    return tmp_path_factory.mktemp("kappa")


@pytest.fixture(scope="session")
def kappa_env(stack_root: Path) -> dict[str, str]:
    """KAPPA_* variables that point a `kappa` subprocess at the session's stack."""
    return {
        "KAPPA_ENV": "test",
        "KAPPA_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
        "KAPPA_REDIS__PORT": str(free_port()),
        "KAPPA_STACK__DATA_DIR": str(stack_root / "stack"),
        "KAPPA_LAKE__ROOT": str(stack_root / "lake"),
        "KAPPA_LAKE__CHECKPOINT_ROOT": str(stack_root / "checkpoints"),
        "KAPPA_COLLECTOR__LOG_PATH": str(stack_root / "collector" / "log.sqlite"),
    }


@pytest.fixture(scope="session")
def test_config(kappa_env: dict[str, str]) -> KappaConfig:
    """The validated config of the session (env `test` plus the session's ports)."""
    return load_config("test", environ=kappa_env)


@pytest.fixture(scope="session")
def stack(test_config: KappaConfig, kappa_env: dict[str, str]) -> Iterator[KappaConfig]:
    """Start the embedded Kafka and Redis once per session; stop them (by pid) at the end.

    If a port was taken between choosing and binding it, the stack starts on new ports and
    ``kappa_env`` is updated in place (``test_config`` keeps the first ports: use this fixture's
    config, or ``kafka_props``, to reach the services).
    """

    def config_for(attempt: int) -> KappaConfig:
        if attempt == 0:
            return test_config
        kappa_env.update({"KAPPA_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
                          "KAPPA_REDIS__PORT": str(free_port())})
        return load_config("test", environ=kappa_env)

    embedded, config = start_stack(config_for)
    try:
        yield config
    finally:
        embedded.down(progress=lambda message: None)


@pytest.fixture(scope="session")
def kafka_props(stack: KappaConfig) -> dict[str, str]:
    """librdkafka properties for the session's broker."""
    return stack.kafka.client_config()


@pytest.fixture()
def topic_factory(kafka_props: dict[str, str]) -> Iterator[Callable[..., str]]:
    """Create a uniquely named topic (default 3 partitions) and return its name.

    The test's topics are deleted when it ends. The embedded broker writes its whole state to one
    JSON file after every write, so each topic left behind would slow every later write of the
    session (measured: a 7 GB state kept it busy at a full core for over a minute after one
    record; docs/runbooks/stack.md).
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(kafka_props)
    created: list[str] = []

    def create(partitions: int = 3, prefix: str = "t") -> str:
        name = f"{prefix}.{uuid.uuid4().hex[:10]}"
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=15)
        created.append(name)
        return name

    yield create
    delete_topics(admin, created)


def delete_topics(admin, topics: list[str]) -> None:
    """Delete ``topics``, best effort (a test may have stopped the broker or deleted one itself)."""
    if not topics:
        return
    for future in admin.delete_topics(topics, operation_timeout=30).values():
        try:
            future.result(timeout=30)
        except Exception:  # cleanup must not fail the test
            pass


@pytest.fixture(scope="session")
def redis_client(stack: KappaConfig):
    """A client of the session's Redis (db 0, flushed by tests that need it empty)."""
    import redis

    client = redis.Redis(**stack.redis.client_kwargs())
    yield client
    client.close()


@pytest.fixture(scope="session")
def spark(test_config: KappaConfig):
    """The one SparkSession of the test session, built by the project's factory."""
    from jobs.spark.session import build_spark

    session = build_spark(test_config, app_name="kappa-tests")
    yield session
    session.stop()


@pytest.fixture()
def run_kappa(kappa_env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the `kappa` CLI in a subprocess against the session's stack."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
            **kwargs) -> subprocess.CompletedProcess[str]:
        full_env = {**os.environ, **kappa_env, **(env or {}), "COLUMNS": "200"}
        return subprocess.run([*KAPPA, *args], env=full_env, capture_output=True, text=True,
                              timeout=timeout, cwd=REPO, check=False, **kwargs)

    return run


@pytest.fixture()
def private_broker(tmp_path):
    """A broker of this test alone; stopped (by its pidfile) at the end."""
    stack, cfg = start_stack(lambda attempt: load_config("test", environ={}, overrides={
        "kafka.bootstrap_servers": f"127.0.0.1:{free_port()}",
        "stack.data_dir": str(tmp_path / f"stack-{attempt}"),
        "redis.embedded": False, "redis.port": free_port()}))
    try:
        yield cfg, stack
    finally:
        stack.down(progress=lambda message: None)


AWS_REGION = "eu-west-1"
AWS_TEST_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": AWS_REGION}


@pytest.fixture(scope="session")
def aws_server() -> Iterator[str]:
    """Moto's S3 and Secrets Manager API server on loopback (one per test session): its URL.

    Tests that talk to it set :data:`AWS_TEST_ENV` (fake credentials, region) for their process
    and the processes they start; each uses buckets and secret names of its own.
    """
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
