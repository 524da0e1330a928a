"""Kafka for Spark without the JVM connector: a Python data source on confluent-kafka."""

from __future__ import annotations

import logging
import pkgutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

STATIC_SOURCES = "org.apache.spark.sql.execution.datasources.DataSourceManager$"
"""The JVM object whose ``dataSourceBuilders`` holds the data sources of ``pyspark_*`` packages."""


def register_data_sources(spark: SparkSession) -> None:
    """Register the project's Python Kafka data source (format name ``kafka-py``)."""
    from jobs.kafka.source import KafkaDataSource

    skip_static_lookup(spark)
    spark.dataSource.register(KafkaDataSource)


def skip_static_lookup(spark: SparkSession) -> bool:
    """Spare Spark its look-up of installed data source packages when there is none to find.

    Spark's first Python data source registration in a JVM starts a Python process that imports
    every module named ``pyspark_*`` on the path, to register the data sources they ship: with it
    registering kafka-py took 0.8-1.4 s here, without it 0.17 s
    (docs/explanation/streaming-performance.md). When the driver's path has no such module, the
    JVM is told the look-up found nothing (its ``DataSourceManager.dataSourceBuilders``). With
    one, or a Spark without that field, Spark looks them up as always. Returns whether the
    look-up was skipped.
    """
    if any(module.name.startswith("pyspark_") for module in pkgutil.iter_modules()):
        return False
    from py4j.protocol import Py4JError

    jvm = spark.sparkContext._jvm
    try:
        manager = getattr(getattr(jvm, STATIC_SOURCES), "MODULE$")
        if not manager.dataSourceBuilders().isEmpty():
            return False  # looked up already (an earlier session of this JVM)
        empty = getattr(getattr(jvm, "scala.collection.immutable.Map$"), "MODULE$").empty()
        getattr(manager, "dataSourceBuilders_$eq")(getattr(jvm, "scala.Some").apply(empty))
    except Py4JError as exc:
        logger.debug("spark: the data source package look-up runs (%s)", exc)
        return False
    return True
