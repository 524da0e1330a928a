"""The streaming job's Python worker daemon: pyspark's own, with the task's modules imported once.

Spark forks every Python worker of an executor from one daemon process (``pyspark.daemon``) and
each new worker imports what its task needs after the fork: pyspark's worker and Arrow
serializers (from ``pyspark.zip``, which Spark puts first on the workers' path and which Python
cannot cache bytecode for), pyarrow, pandas, redis, confluent-kafka and the job's modules. Measured:
imports were 40 % of the Python workers' samples in a profile of a 300k replay
(docs/explanation/streaming-performance.md), paid at every job start and by every batch that lands on a
new worker. Imported here, before the forks, every worker inherits them. Spark starts this module
as ``spark.python.daemon.module`` (jobs/streaming/job.py); on a cluster it comes with the job's
code (``--py-files``).

Threads: pyspark's daemon imports the worker module after the fork because numpy and pyarrow
start threads on import. Here those are OpenBLAS's pool (one thread is asked for below, so none
is started; the tasks do no linear algebra) and jemalloc's background thread, which jemalloc
carries across ``fork()`` with its own ``pthread_atfork`` handlers. The loader's daemon
(jobs/loader/daemon.py) forks workers after importing the same libraries (through Great
Expectations), and the streaming tests (end to end, three kill -9s, the
standalone cluster) run with this one.

Before the imports Spark's own pyspark and py4j zips are taken off the path where they are the
installed packages' copies (and the spark-core jar, which holds no Python), and before the forks
the imported objects are frozen out of the workers' garbage collections (both in
jobs/spark/worker_daemon.py).
"""

from __future__ import annotations

import importlib
import os

from jobs.spark.worker_daemon import drop_spark_zips, serve

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

PRELOAD = (
    "pyspark.worker",
    "pyspark.sql.pandas.serializers",
    "pyarrow",
    "pyarrow.compute",
    "pandas",
    "redis",
    "confluent_kafka",
    "jobs.kafka.source",
    "jobs.kafka.stream",
    "jobs.streaming.task",
    "jobs.streaming.redis_sink",
)


def preload(names: tuple[str, ...] = PRELOAD) -> list[str]:
    """Import ``names``; return those that could not be (each is then imported after the fork)."""
    missing = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


if __name__ == "__main__":
    drop_spark_zips()
    preload()
    serve()
