"""The only place a SparkSession is built (its Kafka and Delta backends: jobs/spark/backends.py)."""

from __future__ import annotations

import atexit
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.config.load import KappaConfig
from jobs.errors import KappaError
from jobs.spark.backends import choose_backends
from jobs.spark.java import JAVA_MAJOR, java_version
from jobs.spark.jvm_archive import java_option
from jobs.spark.worker_daemon import worker_python

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

LOG4J2_DRIVER = Path(__file__).with_name("log4j2-driver.properties")
UI_PORTS = range(4040, 4057)  # Spark's own: spark.ui.port and its 16 retries
JVM_NOISE = re.compile(
    r"^(WARNING: Using incubator modules: |Using Spark's default log4j profile: |"
    r"Setting default log level to |To adjust logging level use sc\.setLogLevel|"
    r".* WARN Utils: Service 'SparkUI' could not bind on port |"
    r".* WARN NativeCodeLoader: Unable to load native-hadoop library)")
"""Lines the driver's JVM prints at every local start that no one can act on (stderr filter)."""
JVM_EXIT_TIMEOUT_S = 30.0


def spark_environment(master: str = "local[*]") -> None:
    """Set the variables Spark needs on this machine (loopback, this interpreter).

    With a local master, Spark's Python processes run this interpreter without Spark's redundant
    zips on their path (:func:`~jobs.spark.worker_daemon.worker_python`); a ``PYSPARK_PYTHON``
    already set is kept.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if not os.environ.get("PYSPARK_PYTHON"):
        os.environ["PYSPARK_PYTHON"] = worker_python() if master.startswith("local") else sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = os.environ.get("PYSPARK_DRIVER_PYTHON") or sys.executable


def build_spark(config: KappaConfig, app_name: str | None = None,
                extra_conf: Mapping[str, str] | None = None) -> SparkSession:
    """Build (or return the running) SparkSession for this run and register Python sources.

    ``extra_conf`` (a job's own settings, e.g. the loader's worker daemon) comes before
    ``spark.conf`` from the config, which can override it.
    """
    major, line = java_version()
    if major < JAVA_MAJOR:
        raise KappaError(f"Spark 4 needs Java {JAVA_MAJOR}+, found {line!r}; set JAVA_HOME")
    spark_environment(config.spark.master)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name or config.spark.app_name)
    if config.spark.master.startswith(("local", "spark://", "yarn", "k8s://")):
        builder = builder.master(config.spark.master)
    settings = session_settings(config, extra_conf)
    settings |= quiet_settings(settings)
    archive = java_option(line) if config.spark.master.startswith("local") else ""
    if archive:  # the driver's classes mapped from the archive `make setup` wrote
        key = "spark.driver.extraJavaOptions"
        settings[key] = f"{archive} {settings[key]}"
    for key, value in settings.items():
        builder = builder.config(key, value)
    from pyspark import SparkContext

    starts_jvm = SparkContext._gateway is None
    with stderr_filtered() if starts_jvm else nullcontext():
        spark = builder.getOrCreate()
    atexit.unregister(_release_at_exit)  # once, however many sessions the process builds
    atexit.register(_release_at_exit)
    spark.sparkContext.setLogLevel("WARN")
    backends = choose_backends(config)
    if backends.kafka == "python":
        from jobs.kafka import register_data_sources

        register_data_sources(spark)
    logger.info("spark session ready master=%s kafka_backend=%s delta_backend=%s",
                config.spark.master, backends.kafka, backends.delta)
    return spark


def session_settings(config: KappaConfig, extra_conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Spark settings :func:`build_spark` gives the builder (``spark.conf`` last, so it wins)."""
    settings: dict[str, str] = {
        "spark.sql.shuffle.partitions": str(config.spark.shuffle_partitions),
        "spark.ui.enabled": str(config.spark.ui_enabled).lower(),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.checkpointLocation.deleteTmpCheckpointDir": "true",
    }
    if config.spark.master.startswith("local"):
        settings |= {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    settings |= dict(extra_conf or {})
    settings |= {key: str(value) for key, value in config.spark.conf.items()}
    return settings


def quiet_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """The driver's log4j2 file and a free UI port, added to ``settings`` (which win).

    ``-Dlog4j2.configurationFile`` goes before any driver Java options of the config, whose own
    ``-D`` comes later and wins. With the UI on and no ``spark.ui.port`` set, the first free
    port of 4040-4056 is chosen here: Spark would print a warning for every busy one.
    """
    key = "spark.driver.extraJavaOptions"
    ours = f"-Dlog4j2.configurationFile=file:{LOG4J2_DRIVER}"
    quiet = {key: f"{ours} {settings.get(key, '')}".strip()}
    if settings.get("spark.ui.enabled", "true") == "true" and "spark.ui.port" not in settings:
        host = settings.get("spark.driver.bindAddress", "")
        port = next((p for p in UI_PORTS if _port_free(host, p)), None)
        if port is not None:
            quiet["spark.ui.port"] = str(port)
    return quiet


def _port_free(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


@contextmanager
def stderr_filtered() -> Iterator[None]:
    """Processes started inside the block get a stderr without :data:`JVM_NOISE` and a known race.

    They inherit fd 2, which during the block is a pipe whose reader thread passes every other
    line on to the real stderr, for as long as anything (the JVM, the Python workers it forks)
    writes to it.
    """
    read_end, write_end = os.pipe()
    real = os.dup(2)
    threading.Thread(target=_pass_on, args=(read_end, real), name="spark-stderr", daemon=True).start()
    saved = os.dup(2)
    sys.stderr.flush()
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _pass_on(read_end: int, target: int) -> None:
    """Copy lines to ``target`` less the noise and the heartbeat's re-registration race.

    jobs/spark/jvm_stderr.py decides; the pipe is drained to its end whatever happens.
    """
    from jobs.spark.jvm_stderr import pass_on

    pass_on(read_end, target, JVM_NOISE)


_releasing: list[threading.Thread] = []
"""The thread :func:`release_spark_soon` started, if any."""


def release_spark_soon() -> None:
    """Start :func:`release_spark` in a thread of its own; the next call of it waits for that.

    For a command whose remaining work needs no Spark (a replay's last Redis apply and its
    summaries): the JVM stops meanwhile instead of after.
    """
    if not _releasing:
        _releasing.append(threading.Thread(target=release_spark, name="kappa-release-spark"))
        _releasing[0].start()


def release_spark(timeout_s: float = JVM_EXIT_TIMEOUT_S) -> bool:
    """Stop this process's SparkContext and wait until the JVM pyspark started for it has exited.

    Without it, pyspark's JVM only notices that its Python driver is gone after the driver has
    exited (its standard input closes), then stops Spark in its shutdown hooks: the JVM, its
    Python worker daemons and the Python data source's planner daemons outlive the command by
    seconds. A command that used Spark calls this before it returns (jobs/cli.py), and
    :func:`build_spark` registers it to run at the interpreter's exit of any other process (an
    Airflow task's). Returns whether there was a Spark to release.
    """
    if _releasing and _releasing[0] is not threading.current_thread():
        _releasing[0].join()
    if "pyspark" not in sys.modules:
        return False
    from pyspark import SparkContext

    context, gateway = SparkContext._active_spark_context, SparkContext._gateway
    if context is None and gateway is None:
        return False
    if context is not None:
        context.stop()  # stops the Python worker daemons and planner daemons with it
    process = getattr(gateway, "proc", None)  # set only when pyspark launched the JVM itself
    if gateway is not None:
        gateway.shutdown()
    if process is not None:
        if process.stdin is not None:
            process.stdin.close()  # the JVM's gateway server exits when its standard input closes
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            logger.warning("the JVM (pid %d) still runs %.0fs after Spark stopped; killing it",
                           process.pid, timeout_s)
            process.kill()
            process.wait()
    SparkContext._gateway = None
    SparkContext._jvm = None
    return True


def _release_at_exit() -> None:
    """:func:`release_spark` when the interpreter exits, without py4j's INFO lines.

    The streams a test runner or Airflow gave the logging handlers may be closed by then.
    """
    logging.getLogger("py4j").setLevel(logging.WARNING)
    release_spark()
