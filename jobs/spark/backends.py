"""Where the Kafka and Delta backends are chosen.

Where Spark's JVM Kafka connector (spark-sql-kafka-0-10) or delta-spark jars are on the
classpath, the adapters route to ``format("kafka")`` / ``format("delta")``; otherwise they use the
project's Python data source on confluent-kafka and delta-rs (``deltalake``).
"""

from __future__ import annotations

import fnmatch
import glob
import os
from dataclasses import dataclass
from pathlib import Path

from jobs.config.load import KappaConfig
from jobs.errors import KappaError

KAFKA_JAR_PATTERN = "spark-sql-kafka-0-10_*.jar"
DELTA_JAR_PATTERN = "delta-spark_*.jar"


@dataclass(frozen=True)
class Backends:
    """Which implementation serves Kafka and Delta I/O, and why."""

    kafka: str
    kafka_reason: str
    delta: str
    delta_reason: str


def jar_dirs() -> list[Path]:
    """Folders whose jars are on the driver classpath."""
    import pyspark

    dirs = [Path(pyspark.__file__).parent / "jars"]
    if os.environ.get("SPARK_HOME"):
        dirs.append(Path(os.environ["SPARK_HOME"]) / "jars")
    return dirs


def _find_jar(pattern: str, extra_jars: str) -> str | None:
    for folder in jar_dirs():
        hits = sorted(glob.glob(str(folder / pattern)))
        if hits:
            return hits[-1]
    for jar in filter(None, extra_jars.split(",")):
        if fnmatch.fnmatch(Path(jar).name, pattern):
            return jar
    return None


def kafka_jar(config: KappaConfig) -> str | None:
    """The spark-sql-kafka-0-10 jar on the classpath (jar folders or spark.jars), if any."""
    return _find_jar(KAFKA_JAR_PATTERN, str(config.spark.conf.get("spark.jars", "")))


def delta_jar(config: KappaConfig) -> str | None:
    """The delta-spark jar on the classpath (jar folders or spark.jars), if any."""
    return _find_jar(DELTA_JAR_PATTERN, str(config.spark.conf.get("spark.jars", "")))


def choose_backends(config: KappaConfig) -> Backends:
    """Decide the Kafka and Delta backends from config and the jars that are present."""
    kafka, kafka_reason = _pick(config.spark.kafka_backend, "python", kafka_jar(config),
                                "spark-sql-kafka-0-10", "kafka")
    delta, delta_reason = _pick(config.spark.delta_backend, "deltalake", delta_jar(config),
                                "delta-spark", "delta")
    return Backends(kafka, kafka_reason, delta, delta_reason)


def _pick(setting: str, python_name: str, jar: str | None, artifact: str, key: str) -> tuple[str, str]:
    where = ", ".join(str(d) for d in jar_dirs())
    if setting == "jvm" and jar is None:
        raise KappaError(
            f"spark.{key}_backend is 'jvm' but no {artifact} jar is on the classpath ({where}, "
            f"spark.jars); add the jar or set spark.{key}_backend=auto")
    if setting == "jvm" or (setting == "auto" and jar):
        return "jvm", f"{artifact} jar found: {jar}"
    if setting == python_name:
        return python_name, f"spark.{key}_backend={python_name} in config"
    return python_name, f"no {artifact} jar in {where} or spark.jars (Maven unreachable here)"
