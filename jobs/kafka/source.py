"""The ``kafka-py`` data source: Spark's Kafka source and sink on confluent-kafka.

Registered by :func:`jobs.kafka.register_data_sources`; read with
``spark.read.format("kafka-py")`` / ``spark.readStream.format("kafka-py")`` and the option names of
Spark's Kafka connector, or through :mod:`jobs.spark.kafka_io`. See docs/kafka-source.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from jobs.errors import KafkaSourceError
from jobs.kafka import dataloss
from jobs.kafka.arrow import kafka_schema
from jobs.kafka.client import OffsetReader
from jobs.kafka.consumer import read_range
from jobs.kafka.offsets import OffsetRange, plan_ranges, split_ranges
from jobs.kafka.options import SourceOptions, parse_sink_options, parse_source_options

logger = logging.getLogger(__name__)

FORMAT = "kafka-py"


class KafkaDataSource(DataSource):
    """Kafka topics as a table: batch and streaming reads, batch and streaming writes."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``kafka-py`` (``kafka`` is Spark's JVM connector)."""
        return FORMAT

    def schema(self) -> StructType:
        """Spark's Kafka source schema; validates the options early (at ``load()``)."""
        options = parse_source_options(self.options, streaming=True)
        return kafka_schema(options.include_headers, options.emit_ranges)

    def reader(self, schema: StructType) -> DataSourceReader:
        """A bounded read from startingOffsets to endingOffsets."""
        options = parse_source_options(self.options, streaming=False)
        _check_schema(schema, options)
        return KafkaBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """An unbounded read whose offsets live in the query's checkpoint."""
        from jobs.kafka.stream import KafkaStreamReader

        options = parse_source_options(self.options, streaming=True)
        _check_schema(schema, options)
        return KafkaStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A batch write of ``topic``/``key``/``value``/``headers``/``partition`` columns."""
        from jobs.kafka.sink import KafkaBatchWriter, sink_layout

        if overwrite:
            raise KafkaSourceError("save mode 'overwrite' is not supported by the Kafka sink: a "
                                   "topic cannot be truncated; use mode('append')")
        options = parse_sink_options(self.options)
        return KafkaBatchWriter(options, sink_layout(schema, options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """A streaming write; each micro-batch is flushed before Spark commits it."""
        from jobs.kafka.sink import KafkaStreamWriter, sink_layout

        options = parse_sink_options(self.options)
        return KafkaStreamWriter(options, sink_layout(schema, options))


class KafkaBatchReader(DataSourceReader):
    """Reads ``[startingOffsets, endingOffsets)`` of every partition, one task per range."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options

    def partitions(self) -> list[InputPartition]:
        """Resolve the start and end offsets now (on the driver) and plan one range per partition."""
        options, began = self._options, time.monotonic()
        reader = OffsetReader(options)
        try:
            tps = reader.topic_partitions()
            if not tps:
                logger.warning("kafka batch read %s: no partitions found; the result is empty",
                               options.describe())
                return []
            start = reader.resolve(options.starting, tps, starting=True)
            end = reader.resolve(options.ending, tps, starting=False) if options.ending else {}
            _check_order(start, end)
            ranges, losses = plan_ranges(start, end, reader.earliest(tps))
        finally:
            reader.close()
        dataloss.report(losses, fail=options.fail_on_data_loss, ledger_dir=options.data_loss_dir)
        planned = split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
        logger.debug("kafka batch plan source=%s ranges=%d rows=%d elapsed_s=%.3f",
                     options.describe(), len(planned), sum(r.size for r in planned),
                     time.monotonic() - began)
        return list(planned)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range on an executor (the placeholder partition of an empty plan reads nothing)."""
        if not isinstance(partition, OffsetRange):
            return iter(())
        if self._options.emit_ranges:
            return iter([partition.as_row()])
        return read_range(partition, self._options)


def _check_schema(schema: StructType, options: SourceOptions) -> None:
    expected = kafka_schema(options.include_headers, options.emit_ranges)
    if schema != expected:
        raise KafkaSourceError(f"the Kafka source has a fixed schema ({expected.simpleString()}) and "
                               f"cannot be read with {schema.simpleString()}; drop .schema(...)")


def _check_order(start: dict[tuple[str, int], int], end: dict[tuple[str, int], int]) -> None:
    for (topic, partition), first in sorted(start.items()):
        last = end.get((topic, partition), first)
        if first > last:
            raise KafkaSourceError(
                f"{topic}-{partition}: the starting offset {first} is after the ending offset "
                f"{last}; check startingOffsets/endingOffsets (or timestamps), or the topic was "
                "recreated")
