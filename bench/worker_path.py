"""What a fresh Spark Python worker's path costs: ``importlib.invalidate_caches()`` per daemon.

Every fresh worker's first task calls ``importlib.invalidate_caches()`` (pyspark's
``setup_spark_files``); in Python 3.11 every zip importer on the path then re-reads its archive's
directory. This starts a real local Spark once per daemon module (pyspark's own and the
project's, which takes Spark's zips and jar off the path: jobs/spark/worker_daemon.py) and, in a
task, times that call and lists the zip importers and where pyspark was imported from. Prints
one JSON object. Never run as a timed test.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/worker_path.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parents[1]
DAEMONS = ("pyspark.daemon", "jobs.streaming.daemon")

PROBE = """
import json, sys
from pyspark.sql import SparkSession

spark = (SparkSession.builder.master("local[1]").appName("kappa-worker-path")
         .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.python.daemon.module", sys.argv[1]).getOrCreate())
CALLS = int(sys.argv[2])


def probe(_):
    import importlib, time, pyspark
    calls = []
    for _ in range(CALLS):
        began = time.perf_counter()
        importlib.invalidate_caches()
        calls.append(time.perf_counter() - began)
    zips = [key for key, finder in sys.path_importer_cache.items()
            if type(finder).__name__ == "zipimporter"]
    return {"invalidate_s": calls, "zip_importers": len(zips), "pyspark": pyspark.__file__}

try:
    print(json.dumps(spark.sparkContext.parallelize([0], 1).map(probe).collect()[0]))
finally:
    spark.stop()
"""


def main(argv: list[str] | None = None) -> int:
    """Probe each daemon module in turn; print the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5, help="invalidate_caches() calls timed per worker")
    args = parser.parse_args(argv)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    result: dict[str, object] = {"benchmark": "worker_path", "calls": args.calls}
    for daemon in DAEMONS:
        out = subprocess.run([sys.executable, "-c", PROBE, daemon, str(args.calls)], env=env, cwd=REPO,
                             check=False, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise SystemExit(f"the probe with {daemon} failed:\n{out.stderr[-2000:]}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        result[daemon] = {"invalidate_ms_median": round(median(row["invalidate_s"]) * 1000, 3),
                          "invalidate_ms": [round(s * 1000, 3) for s in row["invalidate_s"]],
                          "zip_importers": row["zip_importers"],
                          "pyspark_from_zip": ".zip" in row["pyspark"]}
    result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
