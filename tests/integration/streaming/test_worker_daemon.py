"""The streaming job's Python workers, forked by a real local Spark from jobs/streaming/daemon.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]

WORKER_PROBE = """
import gc, json, sys
from pyspark.sql import SparkSession

spark = (SparkSession.builder.master("local[1]").appName("kappa-daemon-probe")
         .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.python.daemon.module", sys.argv[1]).getOrCreate())

def probe(_):
    import os, pyspark
    zips = [k for k, f in sys.path_importer_cache.items() if type(f).__name__ == "zipimporter"]
    return {"frozen": gc.get_freeze_count(), "pyspark": pyspark.__file__, "zip_importers": zips,
            "on_path": [p for p in sys.path if p.endswith((".zip", ".jar"))],
            "spark_put": [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                          if p.endswith(".zip")],
            "jars_put": [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                         if p.endswith(".jar")]}

try:
    rows = spark.sparkContext.parallelize([0, 1], 1).map(probe).collect()
    print(json.dumps(rows))
finally:
    spark.stop()
"""


@pytest.fixture(scope="module")
def worker_rows() -> list[dict[str, Any]]:
    """What a Python worker forked from jobs/streaming/daemon.py by a real local Spark reports."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    out = subprocess.run([sys.executable, "-c", WORKER_PROBE, "jobs.streaming.daemon"], env=env,
                         check=False, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(rows) == 2, rows
    return rows


def test_a_spark_python_worker_forked_by_the_streaming_daemon_collects_without_its_imports(
        worker_rows: list[dict[str, Any]]) -> None:
    """The worker sees the preloaded modules (pyarrow, pandas, confluent-kafka, redis, pyspark's
    worker) frozen."""
    # those imports are about 120,000 tracked objects here; pyspark's own daemon gives 0
    assert min(row["frozen"] for row in worker_rows) > 50_000, worker_rows


def test_the_streaming_daemons_workers_import_the_installed_pyspark_not_sparks_zips(
        worker_rows: list[dict[str, Any]]) -> None:
    """Spark puts pyspark.zip and py4j's zip first on the worker path; the daemon takes them off
    (they are the installed packages' copies), so no worker holds a zip importer to re-read."""
    for row in worker_rows:
        names = {Path(p).name for p in row["spark_put"]}
        assert {"py4j-0.10.9.9-src.zip", "pyspark.zip"} <= names, row  # what Spark put there
        assert any(name.startswith("spark-core_") for name in {Path(p).name for p in row["jars_put"]}), row
        assert row["zip_importers"] == [], row
        left = [Path(p).name for p in row["on_path"]]
        assert not [n for n in left if n == "pyspark.zip" or n.startswith(("py4j-", "spark-core_"))], row
        assert ".zip" not in row["pyspark"] and row["pyspark"].endswith("pyspark/__init__.py"), row
