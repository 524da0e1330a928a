"""What the project's Python worker daemons share: freeze the preloaded objects, then fork.

Spark forks every Python worker of an executor from one daemon (``pyspark.daemon``), and the
project's daemons (jobs/streaming/daemon.py, jobs/loader/daemon.py) import the tasks' libraries
before the forks. pyspark's daemon runs a full ``gc.collect()`` in a worker after every task it
ran, and a full collection visits every object the collector tracks, the inherited imports
included (pyarrow, pandas, confluent-kafka, redis, Great Expectations: hundreds of thousands of
objects); visiting them also writes to their pages, which then stop being shared with the daemon.
Measured in a 300k replay of the streaming job: that post-task collection was 16 % of the Python
workers' profile samples (docs/benchmarks.md, seventh session). ``gc.freeze()`` before the forks
moves the preloaded objects to the collector's permanent generation: the workers' collections
skip them, and still collect everything a task creates.
"""

from __future__ import annotations

import gc
from collections.abc import Callable


def serve(manager: Callable[[], None] | None = None) -> None:
    """Freeze what this process has imported, then run the daemon (``pyspark.daemon.manager``)."""
    if manager is None:
        from pyspark import daemon

        manager = daemon.manager
    gc.collect()  # what is garbage now is not frozen with the rest
    gc.freeze()
    manager()
