"""The streaming job's worker daemon preloads the task's modules (and survives a missing one)."""

from __future__ import annotations

import gc
import subprocess
import sys

from jobs.config.load import load_config
from jobs.streaming.daemon import PRELOAD
from jobs.streaming.job import WORKER_CONF, job_spark_conf


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


RAW_LOCAL = {"spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
             "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem"}


def test_only_a_local_job_reading_its_own_ranges_asks_for_the_quick_jit() -> None:
    daemon = {"spark.python.daemon.module": "jobs.streaming.daemon"} | RAW_LOCAL
    quick = daemon | {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 "
                      "-XX:G1PeriodicGCInterval=2000 -XX:MaxHeapFreeRatio=30 -XX:MinHeapFreeRatio=10"}
    assert job_spark_conf(load_config("test", environ={"KAPPA_SPARK__MASTER": "local[2]"})) == quick
    assert job_spark_conf(load_config("test", environ={
        "KAPPA_SPARK__MASTER": "spark://127.0.0.1:7077"})) == daemon
    assert job_spark_conf(load_config("test", environ={
        "KAPPA_SPARK__MASTER": "local[2]", "KAPPA_STREAMING__READ_IN_TASKS": "false"})) == daemon


def test_only_a_checkpoint_on_a_local_disk_goes_without_checksum_files() -> None:
    for root in ("var/checkpoints", "/data/checkpoints", "file:///data/checkpoints"):
        conf = job_spark_conf(load_config("test", environ={"KAPPA_LAKE__CHECKPOINT_ROOT": root}))
        assert RAW_LOCAL.items() <= conf.items(), root
    for root in ("hdfs://nn:8020/checkpoints", "s3a://bucket/checkpoints"):
        conf = job_spark_conf(load_config("test", environ={"KAPPA_LAKE__CHECKPOINT_ROOT": root}))
        assert not RAW_LOCAL.keys() & conf.keys(), root


def test_the_daemon_freezes_what_it_imported_before_it_forks_a_worker() -> None:
    from jobs.spark.worker_daemon import serve

    seen: list[int] = []
    imported = [[] for _ in range(1000)]  # objects the collector tracks, held by the "daemon"
    assert gc.get_freeze_count() == 0
    try:
        serve(manager=lambda: seen.append(gc.get_freeze_count()))
    finally:
        gc.unfreeze()
    assert len(seen) == 1 and seen[0] >= len(imported)
    assert gc.get_freeze_count() == 0

