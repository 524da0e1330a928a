"""The streaming job's worker daemon preloads the task's modules (and survives a missing one)."""

from __future__ import annotations

import subprocess
import sys

from jobs.streaming.daemon import PRELOAD
from jobs.streaming.job import WORKER_CONF


def test_every_preloaded_module_imports_and_a_missing_one_is_reported_not_raised() -> None:
    code = ("from jobs.streaming.daemon import PRELOAD, preload; "
            "print(preload(PRELOAD + ('kappa_no_such_module',)))")
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "['kappa_no_such_module']"
    assert "jobs.streaming.task" in PRELOAD


def test_the_job_asks_spark_for_this_daemon() -> None:
    assert WORKER_CONF == {"spark.python.daemon.module": "jobs.streaming.daemon"}
