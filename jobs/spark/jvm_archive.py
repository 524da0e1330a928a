"""A class-data-sharing archive of the local Spark driver's classes: its JVM starts in half the time.

A local SparkSession's JVM loads and verifies about 15,000 classes from pyspark's jars before the
first query. Java 17 can map classes it archived at the exit of an earlier run
(``-XX:ArchiveClassesAtExit``, a dynamic CDS archive) instead: measured here, a session built in
3.6-4.0 s instead of 7.0-8.0 s and its first job ran in 0.7-0.8 s instead of 1.8-2.1 s
(docs/explanation/streaming-performance.md). ``make setup`` writes it
(jobs/spark_service/archive.py); :func:`java_option` is what
:func:`jobs.spark.session.build_spark` adds to a local driver's options once the archive exists.

The archive belongs to one JDK and one pyspark installation (its file name carries a digest of
both) and lives under ``$XDG_CACHE_HOME/kappa`` (``~/.cache/kappa``): a JVM refuses an archive of
other settings and starts without it. ``KAPPA_SPARK_CDS=off`` leaves it unused.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from jobs.spark.java import java_version

OFF_ENV = "KAPPA_SPARK_CDS"


def archive_path(java_line: str | None = None) -> Path:
    """Where the archive of this JDK and this pyspark installation is kept.

    ``java_line``: ``java -version``'s version line, read when not given.
    """
    import pyspark

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
