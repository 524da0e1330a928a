"""``kappa doctor``: what runs where, with which versions and backends, and why."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import Any

from jobs.config.load import KappaConfig
from jobs.errors import KappaError
from jobs.spark.attach import choose
from jobs.spark.backends import choose_backends
from jobs.spark.java import JAVA_MAJOR, java_version
from jobs.stack.health import kafka_healthy, redis_healthy

PACKAGES = ("pyspark", "delta-spark", "deltalake", "confluent-kafka", "apache-airflow",
            "great-expectations", "redis", "noida-db")


def run_doctor(config: KappaConfig) -> dict[str, Any]:
    """Run every check; return ``{"checks": [{name, ok, detail}], "versions": {...}}``."""
    checks: list[dict[str, Any]] = []

    def add(name: str, ok: bool, detail: str) -> None:
        checks.append({"name": name, "ok": ok, "detail": detail})

    add("python", sys.version_info[:2] == (3, 11),
        f"{platform.python_version()} at {sys.executable} (3.11 expected)")
    try:
        major, line = java_version()
        add("java", major >= JAVA_MAJOR, f"{line} (Java {JAVA_MAJOR}+ required by Spark 4)")
    except KappaError as exc:
        add("java", False, str(exc))
    versions = {name: _version(name) for name in PACKAGES}
    add("spark", versions["pyspark"] != "missing",
        f"pyspark {versions['pyspark']}, master {config.spark.master}")
    try:
        backends = choose_backends(config)
        add("kafka backend", True, f"{backends.kafka}: {backends.kafka_reason}")
        add("delta backend", True, f"{backends.delta}: {backends.delta_reason}")
    except KappaError as exc:
        add("backends", False, str(exc))
    choice = choose(config)
    add("spark service", True, ("attach: " if choice.attach else "cold: ") + choice.reason)
    kind = "embedded" if config.kafka.embedded else "external"
    error = kafka_healthy(config.kafka.client_config())
    add("kafka", error is None, error or f"{kind} at {config.kafka.bootstrap_servers} answers")
    kind = "embedded" if config.redis.embedded else "external"
    error = redis_healthy(config.redis.client_kwargs())
    add("redis", error is None, error or f"{kind} at {config.redis.host}:{config.redis.port} answers")
    add("config", True, f"env {config.env}")
    return {"checks": checks, "versions": versions}


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "missing"
