"""The loader's Python worker daemon: pyspark's own, with Great Expectations imported once.

Spark forks every Python worker of an executor from one daemon process (``pyspark.daemon``).
The executor write path validates with Great Expectations inside its workers, and importing it
costs about 9 s of CPU in each fresh worker; imported here, before the forks, every worker
inherits it. Spark starts it as ``spark.python.daemon.module`` (jobs/loader/scale.py
``loader_spark``). As the streaming job's daemon, it first takes Spark's own pyspark and py4j
zips off the path where they are the installed packages' copies, and the spark-core jar, which
holds no Python (jobs/spark/worker_daemon.py).
"""

from __future__ import annotations

import os

from jobs.spark.worker_daemon import drop_spark_zips, serve

if __name__ == "__main__":
    drop_spark_zips()
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations  # noqa: F401  (inherited by the forked workers)

    serve()  # frozen out of the workers' garbage collections, then forked
