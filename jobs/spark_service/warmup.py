"""The Spark service's warm-up: one tiny streaming query over a Python data source.

The first query of a Spark pays for what later ones reuse: the executors' Python worker daemon
(jobs/streaming/daemon.py, with the task's libraries imported), the Python data source planner
daemons (``lookup_data_sources``, ``create_data_source``, ``plan_data_source_read``) and the JIT
of the streaming engine. Measured without this warm-up (a 10k replay, 2 loaded cores): the first
replay attached to a service that had just started took 16.4 s, the next ones 2.9-4.6 s. The
service runs this query before it answers anyone, so the first replay attached to it does not
pay for them.
"""

from __future__ import annotations

import tempfile
import time
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SOURCE_NAME = "kappa-warmup"
ROWS = 3


class WarmupSource(DataSource):
    """A streaming source of ``ROWS`` rows in one offset range."""

    @classmethod
    def name(cls) -> str:
        """The format name the warm-up reads."""
        return SOURCE_NAME

    def schema(self) -> str:
        """One long column."""
        return "id long"

    def streamReader(self, schema) -> DataSourceStreamReader:
        """The reader of the one range."""
        del schema
        return WarmupReader()


class WarmupReader(DataSourceStreamReader):
    """Offsets 0 to ``ROWS``, read in one partition."""

    def initialOffset(self) -> dict:
        """Where the stream starts."""
        return {"offset": 0}

    def latestOffset(self, start: dict, limit) -> dict:
        """Where it ends (all of it in one batch)."""
        del start, limit
        return {"offset": ROWS}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """One partition for the whole range."""
        return [InputPartition((start["offset"], end["offset"]))]

    def read(self, partition):
        """The range's rows."""
        first, last = partition.value
        for value in range(first, last):
            yield (value,)


def warm_up(spark: SparkSession) -> float:
    """Run the warm-up query and an Arrow task to its end; return how long it took (s)."""
    started = time.monotonic()
    spark.dataSource.register(WarmupSource)
    with tempfile.TemporaryDirectory(prefix="kappa-spark-warmup-") as checkpoint:
        query = (spark.readStream.format(SOURCE_NAME).load()
                 .writeStream.foreachBatch(_arrow_batch).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
    return time.monotonic() - started


def _arrow_batch(frame, batch_id: int) -> None:
    """What a batch of the streaming job does first: Python tasks over Arrow."""
    del batch_id
    frame.mapInArrow(lambda batches: batches, frame.schema).collect()
