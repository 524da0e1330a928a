"""A class-data-sharing archive of the local Spark driver's classes: its JVM starts in half the time.

A local SparkSession's JVM loads and verifies about 15,000 classes from pyspark's jars before the
first query. Java 17 can map classes it archived at the exit of an earlier run
(``-XX:ArchiveClassesAtExit``, a dynamic CDS archive) instead: measured here, a session built in
3.6-4.0 s instead of 7.0-8.0 s and its first job ran in 0.7-0.8 s instead of 1.8-2.1 s
(docs/explanation/streaming-performance.md). ``make setup`` runs this module, which starts a
session that archives its classes when its JVM exits; :func:`java_option` is what
:func:`jobs.common.spark.build_spark` adds to a local driver's options once the archive exists.

The archive belongs to one JDK and one pyspark installation (its file name carries a digest of
both), lives under ``$XDG_CACHE_HOME/kappa`` (``~/.cache/kappa``), and is moved into place only
once the JVM that wrote it has exited: a JVM refuses an archive of other settings and starts
without it, but would crash on a partly written one. ``KAPPA_SPARK_CDS=off`` leaves it unused.

    .venv/bin/python -m jobs.common.jvm_archive
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

OFF_ENV = "KAPPA_SPARK_CDS"
DUMP_WAIT_S = 180.0
"""How long the archiving JVM may take to write the archive as it exits."""


def archive_path(java_line: str | None = None) -> Path:
    """Where the archive of this JDK and this pyspark installation is kept.

    ``java_line``: ``java -version``'s version line, read when not given.
    """
    import pyspark

    from jobs.common.spark import java_version

    line = java_line if java_line is not None else java_version()[1]
    java = os.environ.get("JAVA_HOME") or ""
    key = f"{line}|{java}|{Path(pyspark.__file__).resolve().parent}|{pyspark.__version__}"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kappa"
    return cache / f"spark-cds-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def java_option(java_line: str | None = None) -> str:
    """``-XX:SharedArchiveFile=...`` when the archive exists (and is not switched off), else ``""``."""
    if os.environ.get(OFF_ENV, "").lower() in ("off", "0", "false", "no"):
        return ""
    try:
        path = archive_path(java_line)
    except Exception:  # no java: build_spark says so itself
        return ""
    return f"-XX:SharedArchiveFile={path}" if path.is_file() else ""


def build() -> Path:
    """Write the archive unless it exists: a session in a child process, archived at its JVM's exit."""
    path = archive_path()
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    child = subprocess.run([sys.executable, "-m", "jobs.common.jvm_archive", "--dump", str(partial)],
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
    from jobs.common.config import load_config
    from jobs.common.spark import build_spark
    from jobs.streaming.job import job_spark_conf

    cfg = load_config()
    conf = job_spark_conf(cfg)
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
