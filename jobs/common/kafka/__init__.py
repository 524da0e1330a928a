"""Kafka for Spark without the JVM connector: a Python data source on confluent-kafka."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register_data_sources(spark: SparkSession) -> None:
    """Register the project's Python Kafka data source (format name ``kafka-py``)."""
    from jobs.common.kafka.source import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
