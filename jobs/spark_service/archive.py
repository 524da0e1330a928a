"""Writing the local Spark driver's class archive (jobs/spark/jvm_archive.py), as ``make setup`` does.

A session in a child process, with the Spark service's settings (those of the streaming job, so
the service's and the job's JVMs map it), archives its classes when its JVM exits. The archive is
moved into place only once that JVM has exited: a JVM would crash on a partly written one.

    .venv/bin/python -m jobs.spark_service.archive
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jobs.spark.jvm_archive import OFF_ENV, archive_path

DUMP_WAIT_S = 180.0
"""How long the archiving JVM may take to write the archive as it exits."""


def build() -> Path:
    """Write the archive unless it exists: a session in a child process, archived at its JVM's exit."""
    path = archive_path()
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    child = subprocess.run([sys.executable, "-m", "jobs.spark_service.archive", "--dump", str(partial)],
                           capture_output=True, text=True, check=False, timeout=600)
    if child.returncode:
        raise RuntimeError(f"the archiving session failed: {child.stderr.strip()[-500:]}")
    if child.stdout.split()[-2:] != ["exit", "0"]:  # killed or failed while writing: not usable
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"the archiving JVM did not exit cleanly ({child.stdout.strip()[-200:]})")
    if not partial.is_file() or not partial.stat().st_size:
        raise RuntimeError("the archiving JVM wrote no archive")
    partial.replace(path)
    return path


def _dump(partial: str) -> None:
    """A session whose JVM archives its classes at exit, after the work every job starts with."""
    os.environ[OFF_ENV] = "off"  # no archive of an older one
    from jobs.config.load import load_config
    from jobs.spark.session import build_spark
    from jobs.spark_service.server import service_conf

    cfg = load_config()
    conf = service_conf(cfg)
    key = "spark.driver.extraJavaOptions"
    conf[key] = f"{conf.get(key, '')} -XX:ArchiveClassesAtExit={partial} -Xlog:cds=off -Xlog:cds+dynamic=off"
    spark = build_spark(cfg, app_name="kappa-jvm-archive", extra_conf=conf)
    frame = spark.range(1000).selectExpr("id", "cast(id as string) as text")
    frame.mapInArrow(lambda batches: batches, frame.schema).groupBy("text").count().collect()
    spark.sql("SELECT current_timestamp(), 1 + 1").collect()
    spark.stop()
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    process = gateway.proc  # type: ignore[union-attr]
    gateway.shutdown()  # type: ignore[union-attr]
    process.stdin.close()  # the JVM exits, writing the archive first
    code = process.wait(DUMP_WAIT_S)
    SparkContext._gateway = SparkContext._jvm = None  # nothing left for the release at exit
    print("exit", code)


def main(argv: list[str] | None = None) -> int:
    """Build the archive (``--dump PATH``: be the child that writes it); warn, never fail, when it cannot."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--dump"]:
        _dump(args[1])
        return 0
    try:
        path = build()
    except Exception as exc:
        print(f"warning: no class-data-sharing archive for the local Spark ({exc}); Spark still "
              "works, its JVM starts slower", file=sys.stderr)
        return 0
    print(f"jvm archive: {path} ({path.stat().st_size // 2**20} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
