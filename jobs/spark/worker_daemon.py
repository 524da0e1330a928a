"""What the project's Python worker daemons share: freeze the preloaded objects, then fork.

Spark forks every Python worker of an executor from one daemon (``pyspark.daemon``), and the
project's daemons (jobs/streaming/daemon.py, jobs/loader/daemon.py) import the tasks' libraries
before the forks. pyspark's daemon runs a full ``gc.collect()`` in a worker after every task it
ran, and a full collection visits every object the collector tracks, the inherited imports
included (pyarrow, pandas, confluent-kafka, redis, Great Expectations: hundreds of thousands of
objects); visiting them also writes to their pages, which then stop being shared with the daemon.
Measured in a 300k replay of the streaming job: that post-task collection was 16 % of the Python
workers' profile samples (docs/explanation/streaming-performance.md). ``gc.freeze()`` before the forks
moves the preloaded objects to the collector's permanent generation: the workers' collections
skip them, and still collect everything a task creates.

Spark also puts its own ``pyspark.zip``, ``py4j-*-src.zip`` and ``spark-core_*.jar`` first on
every Python worker's path. Python cannot cache bytecode for modules imported from a zip, and
every fresh worker's first task calls ``importlib.invalidate_caches()`` (pyspark's
``setup_spark_files``), which in Python 3.11 makes each zip importer read its whole archive's
directory again (pyspark.zip: 2,576 files, one importer per package imported from it; the jar:
5,854 files, no Python in them): 0.38 s per call in an idle worker of pyspark's daemon, 0.4-0.8 s
in a worker during a replay (bench/worker_path.py measures it). :func:`drop_spark_zips` takes
off the daemon's path, before it imports anything, the zips that are the installed packages'
own copies and the jars that hold no Python: the daemon and its workers import pyspark and py4j
from the installation (bytecode cached) and hold no zip importer.

Spark starts other Python processes without a daemon: the streaming source's runner of every
query, the planners of the Python data sources. With a local master, :func:`worker_python` is the
Python Spark starts for all of them: a script that takes the same entries off ``PYTHONPATH``
before it runs this interpreter (a source runner ready in 0.3-0.4 s instead of 1.1-1.2 s).
"""

from __future__ import annotations

import gc
import hashlib
import importlib.machinery
import importlib.metadata
import os
import re
import shlex
import sys
import zipfile
from collections.abc import Callable, MutableSequence
from pathlib import Path

_PY4J_ZIP = re.compile(r"py4j-(?P<version>[0-9][0-9a-zA-Z.]*)-src\.zip")


def serve(manager: Callable[[], None] | None = None) -> None:
    """Freeze what this process has imported, then run the daemon (``pyspark.daemon.manager``)."""
    if manager is None:
        from pyspark import daemon

        manager = daemon.manager
    gc.collect()  # what is garbage now is not frozen with the rest
    gc.freeze()
    manager()


def drop_spark_zips(path: MutableSequence[str] | None = None) -> list[str]:
    """Take Spark's zips and jars off ``path`` (sys.path) where Python needs nothing from them.

    A zip is dropped only when it is the installed package's own copy: ``pyspark.zip`` when it
    lies inside the ``pyspark`` package the rest of the path imports (pip's pyspark ships it
    there), ``py4j-X-src.zip`` when the installed py4j is version X. Otherwise (a Spark
    distribution's zips with no pyspark installed, or another version installed) they stay as
    Spark set them. A ``.jar`` is dropped when it holds no Python file. Returns the entries
    removed; their cached importers are forgotten too.
    """
    entries = sys.path if path is None else path
    removed = [entry for entry in list(entries) if _installed_copy(entry, entries)]
    for entry in removed:
        entries.remove(entry)
    if path is None:
        for key in [key for key in sys.path_importer_cache
                    if any(key == entry or key.startswith(entry + os.sep) for entry in removed)]:
            del sys.path_importer_cache[key]
    return removed


def _installed_copy(entry: str, entries: MutableSequence[str]) -> bool:
    name = os.path.basename(entry)
    if name.endswith(".jar"):
        return _without_python(entry)
    others = [other for other in entries if other != entry and not other.endswith(".zip")]
    if name == "pyspark.zip":
        spec = importlib.machinery.PathFinder.find_spec("pyspark", others)
        if spec is None or spec.origin is None:
            return False
        package = os.path.dirname(os.path.realpath(spec.origin))
        return os.path.realpath(entry).startswith(package + os.sep)
    match = _PY4J_ZIP.fullmatch(name)
    if match is None or importlib.machinery.PathFinder.find_spec("py4j", others) is None:
        return False
    try:
        return importlib.metadata.version("py4j") == match["version"]
    except importlib.metadata.PackageNotFoundError:
        return False


def _without_python(jar: str) -> bool:
    try:
        with zipfile.ZipFile(jar) as archive:
            return not any(member.endswith((".py", ".pyc")) for member in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False  # not ours to judge: left where Spark put it


def worker_python(python: str = sys.executable) -> str:
    """The Python for Spark's local Python processes (``python``, or a script that runs it).

    The script takes Spark's redundant zips and jars (:func:`drop_spark_zips`) off ``PYTHONPATH``;
    where there are none (Spark's own distribution, no pyspark installed), ``python`` itself.
    The script is written once per content, under ``$XDG_CACHE_HOME/kappa`` (``~/.cache/kappa``).
    """
    import pyspark

    package = Path(pyspark.__file__).resolve().parent
    candidates = [str(path) for pattern in ("python/lib/pyspark.zip", "python/lib/py4j-*-src.zip",
                                            "jars/spark-core_*.jar") for path in package.glob(pattern)]
    dropped = drop_spark_zips([*candidates, *sys.path])
    if not dropped:
        return python
    text = _SCRIPT.format(entries="|".join(shlex.quote(entry) for entry in dropped),
                          python=shlex.quote(python))
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kappa"
    script = cache / f"spark-python-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    try:
        if not script.exists():
            cache.mkdir(parents=True, exist_ok=True)
            partial = script.with_name(f"{script.name}.{os.getpid()}")
            partial.write_text(text)
            partial.chmod(0o755)
            partial.replace(script)
    except OSError:  # no writable cache: Spark's processes import from its zips, only slower
        return python
    return str(script)


_SCRIPT = """#!/bin/sh
# kappa (jobs/spark/worker_daemon.py): Spark's copies of pyspark and py4j off PYTHONPATH
set -f
kept=
IFS=:
for entry in $PYTHONPATH; do
  case "$entry" in
    {entries}) ;;
    *) kept=${{kept:+$kept:}}$entry ;;
  esac
done
unset IFS
if [ -n "$kept" ]; then export PYTHONPATH="$kept"; else unset PYTHONPATH; fi
exec {python} "$@"
"""
