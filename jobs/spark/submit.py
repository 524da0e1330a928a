"""Submitting a job to a Spark cluster: the code zip and the ``spark-submit`` command line.

A cluster's executors do not have this repository: the ``jobs`` and ``pipelines`` packages (the
engine, and the pipelines' code its tasks call) travel to them as one zip passed with
``--py-files`` (Spark puts it on ``sys.path`` of the driver and of every Python worker, which is
where the ``kafka-py`` data source's readers and the foreachBatch code run).
The entry points are ``jobs/streaming/main.py`` and ``jobs/batch/main.py`` (file paths, as
spark-submit needs).

``build_submit`` is pure (it builds no zip, starts nothing): the CLI (``kappa stream submit``)
and the Airflow DAGs call ``package_code`` first, then run what ``build_submit`` returns.
docs/deploy.md shows the same submit on YARN, Kubernetes and EMR Serverless.
"""

from __future__ import annotations

import os
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from jobs.config.load import PROJECT_ROOT, KappaConfig
from jobs.errors import ConfigError, KappaError
from jobs.lake import statefs

PACKAGES = ("jobs", "pipelines")
DIST_ZIP = PROJECT_ROOT / "var" / "dist" / "kappa-jobs.zip"
STREAM_ENTRY = PROJECT_ROOT / "jobs" / "streaming" / "main.py"
BATCH_ENTRY = PROJECT_ROOT / "jobs" / "batch" / "main.py"
SKIP_PARTS = frozenset({"__pycache__"})
SKIP_SUFFIXES = (".pyc", ".pyo")
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same code gives the same bytes
SUBMIT_MASTERS = ("local", "spark://", "yarn", "k8s://", "mesos://")
CLUSTER_ENV_PREFIXES = {"yarn": "spark.yarn.appMasterEnv.", "k8s://": "spark.kubernetes.driverEnv."}
SECRET_WORDS = ("PASSWORD", "SECRET", "TOKEN", "USERNAME", "CLIENT")
# Where a secret is read from, not a secret: forwarded (KAPPA_SECRETS__*: the secret store's
# provider, region, endpoint)
SECRET_REFERENCE_SUFFIXES = ("_SECRET_ARN", "_TOKEN_ENV")


class SubmitError(KappaError):
    """The job could not be packaged or handed to spark-submit."""


def package_code(dest: Path = DIST_ZIP, root: Path = PROJECT_ROOT) -> Path:
    """Zip the :data:`PACKAGES` under ``root`` (sources and package data, no caches) for ``--py-files``.

    Written to a temporary file and renamed, so a concurrent submit never ships half a zip.
    """
    for package in PACKAGES:
        if not (root / package / "__init__.py").is_file():
            raise SubmitError(f"{root / package} is not a Python package (no __init__.py); run from the "
                              "repository")
    files = sorted(path for package in PACKAGES for path in (root / package).rglob("*")
                   if path.is_file() and not SKIP_PARTS.intersection(path.parts)
                   and not path.name.endswith(SKIP_SUFFIXES))
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            info = zipfile.ZipInfo(str(path.relative_to(root)), ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, path.read_bytes())
    partial.replace(dest)
    return dest


def spark_submit_path() -> Path:
    """``$SPARK_HOME/bin/spark-submit``, else the one the pyspark package ships."""
    if os.environ.get("SPARK_HOME"):
        found = Path(os.environ["SPARK_HOME"]) / "bin" / "spark-submit"
    else:
        import pyspark

        found = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    if not found.is_file():
        raise SubmitError(f"spark-submit not found at {found}; set SPARK_HOME to a Spark 4.2 "
                          "installation or reinstall pyspark")
    return found


def build_submit(cfg: KappaConfig, args: Sequence[str], *, master: str | None = None,
                 deploy_mode: str = "client", python: str | None = None,
                 code: Path | str = DIST_ZIP, entry: Path | str = STREAM_ENTRY,
                 conf: Mapping[str, str] | None = None,
                 environ: Mapping[str, str] | None = None, name: str = "stream") -> list[str]:
    """The ``spark-submit`` command that runs ``entry`` with ``args`` on ``master``.

    Args:
        cfg: the run's config (``spark.master``, ``spark.app_name``, ``spark.conf``).
        args: the entry point's own arguments (``--mode replay --from earliest ...``).
        master: overrides ``spark.master``.
        deploy_mode: ``client`` (driver here) or ``cluster`` (driver on the cluster).
        python: the executors' interpreter (``spark.pyspark.python``); default this one. On a
            cluster it is the path of a venv that exists on every node or in the image.
        code: the zip from :func:`package_code`, or its copy on HDFS/S3.
        entry: the entry point file (local, or its HDFS/S3 copy).
        conf: extra ``--conf`` settings, applied last.
        environ: where ``KAPPA_*`` variables are read for a cluster-mode driver (default
            ``os.environ``); secrets among them are never put on the command line.
        name: the application name's suffix (``<spark.app_name>-<name>``).
    """
    chosen = master or cfg.spark.master
    if not chosen.startswith(SUBMIT_MASTERS):
        raise ConfigError(f"spark.master {chosen!r} is not a spark-submit master; use local[N], "
                          "spark://host:port, yarn or k8s://https://host:port (EMR Serverless: "
                          "start-job-run, see docs/deploy.md)")
    if deploy_mode not in ("client", "cluster"):
        raise ConfigError(f"--deploy-mode {deploy_mode!r}: choose client or cluster")
    statefs.location(cfg.lake.checkpoint_root)   # the job's state: a local path or S3, nothing else
    settings: dict[str, str] = {key: str(value) for key, value in cfg.spark.conf.items()}
    settings["spark.pyspark.python"] = python or sys.executable
    if deploy_mode == "client":
        settings["spark.pyspark.driver.python"] = sys.executable
    else:
        settings |= _driver_env(chosen, os.environ if environ is None else environ)
    settings["spark.executorEnv.PYTHONPATH"] = _worker_path(str(code))
    settings |= dict(conf or {})
    command = [str(spark_submit_path()), "--master", chosen, "--deploy-mode", deploy_mode,
               "--name", f"{cfg.spark.app_name}-{name}", "--py-files", str(code)]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, str(entry), *args]


def _worker_path(code: str) -> str:
    """Where Python workers find the zip through PYTHONPATH (``spark.executorEnv.PYTHONPATH``).

    Executors' workers get ``--py-files`` on sys.path anyway; the driver's own Python workers
    that plan the ``kafka-py`` streaming source (python_streaming_source_runner) do not, and
    take this variable: the zip's local path, its path in the image (``local:``), or its name
    in the working folder where YARN/EMR localise ``--py-files``.
    """
    if code.startswith("local:"):
        return code.removeprefix("local://").removeprefix("local:")
    if "://" not in code:
        return str(Path(code).resolve())
    return code.rsplit("/", 1)[-1]


def _driver_env(master: str, environ: Mapping[str, str]) -> dict[str, str]:
    """KAPPA_* variables for a driver that runs on the cluster (YARN AM / Kubernetes pod)."""
    prefix = next((p for m, p in CLUSTER_ENV_PREFIXES.items() if master.startswith(m)), None)
    if prefix is None:
        return {}
    return {f"{prefix}{name}": value for name, value in sorted(environ.items())
            if name.startswith("KAPPA_") and not secret_variable(name)}


def secret_variable(name: str) -> bool:
    """Whether an environment variable may hold a secret (never put on a command line)."""
    if name.startswith("KAPPA_SECRETS__") or name.endswith(SECRET_REFERENCE_SUFFIXES):
        return False
    return any(word in name for word in SECRET_WORDS)


def submit(cfg: KappaConfig, args: Sequence[str], **options) -> int:
    """Package the code, run spark-submit in the foreground, return its exit code."""
    import subprocess

    command = build_submit(cfg, args, code=package_code(), **options)
    return subprocess.run(command, check=False).returncode


def submit_command(args: Sequence[str], *, conf: Sequence[str] | None, dry_run: bool,
                   **options) -> str | int:
    """What ``kappa stream submit`` and ``kappa batch submit`` do with their options.

    ``conf`` holds ``KEY=VALUE`` items (ConfigError otherwise). Returns the command line (a
    string) under ``dry_run``, else spark-submit's exit code.
    """
    import shlex

    from jobs.config.load import load_config

    pairs = [item.partition("=") for item in conf or []]
    if any(not key or not sep for key, sep, _ in pairs):
        raise ConfigError(f"--conf takes KEY=VALUE, found {list(conf or [])!r}")
    options["conf"] = {key: value for key, _, value in pairs}
    if dry_run:
        return shlex.join(build_submit(load_config(), args, **options))
    return submit(load_config(), args, **options)
