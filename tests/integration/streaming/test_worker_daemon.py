"""The streaming job's Python workers, forked by a real local Spark from jobs/streaming/daemon.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

WORKER_PROBE = """
import gc, json, sys
from pyspark.sql import SparkSession

spark = (SparkSession.builder.master("local[1]").appName("kappa-daemon-probe")
         .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.python.daemon.module", sys.argv[1]).getOrCreate())
try:
    rows = spark.sparkContext.parallelize([0, 1], 1).map(lambda _: gc.get_freeze_count()).collect()
    print(json.dumps(rows))
finally:
    spark.stop()
"""


def test_a_spark_python_worker_forked_by_the_streaming_daemon_collects_without_its_imports() -> None:
    """A real local Spark forks its Python worker from jobs/streaming/daemon.py: the worker sees
    the preloaded modules (pyarrow, pandas, confluent-kafka, redis, pyspark's worker) frozen."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    out = subprocess.run([sys.executable, "-c", WORKER_PROBE, "jobs.streaming.daemon"], env=env,
                         check=False, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    frozen = json.loads(out.stdout.strip().splitlines()[-1])
    # those imports are about 120,000 tracked objects here; pyspark's own daemon gives 0
    assert len(frozen) == 2 and min(frozen) > 50_000, frozen
