"""Which of Spark's zips a worker daemon takes off its path (the real installed pyspark and py4j)."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pyspark

from jobs.spark.worker_daemon import drop_spark_zips, worker_python

SITE = str(Path(pyspark.__file__).resolve().parents[1])
LIB = Path(pyspark.__file__).resolve().parent / "python" / "lib"
PYSPARK_ZIP = str(LIB / "pyspark.zip")
PY4J_ZIP = str(LIB / f"py4j-{importlib.metadata.version('py4j')}-src.zip")
SPARK_CORE = str(next((Path(pyspark.__file__).resolve().parent / "jars").glob("spark-core_*.jar")))


def test_the_installed_packages_own_zips_and_a_jar_without_python_are_dropped(tmp_path: Path) -> None:
    code = tmp_path / "code.zip"
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("jobs/__init__.py", "")
    jar_with_python = tmp_path / "udfs.jar"
    with zipfile.ZipFile(jar_with_python, "w") as archive:
        archive.writestr("helpers/udf.py", "")
    path = [PYSPARK_ZIP, PY4J_ZIP, SPARK_CORE, str(jar_with_python), str(code), SITE]
    assert drop_spark_zips(path) == [PYSPARK_ZIP, PY4J_ZIP, SPARK_CORE]
    assert path == [str(jar_with_python), str(code), SITE]


def test_zips_stay_when_nothing_else_on_the_path_provides_the_packages() -> None:
    path = [PYSPARK_ZIP, PY4J_ZIP]
    assert drop_spark_zips(path) == []
    assert path == [PYSPARK_ZIP, PY4J_ZIP]


def test_a_pyspark_zip_from_another_spark_and_a_py4j_zip_of_another_version_stay(tmp_path: Path) -> None:
    other = tmp_path / "spark-home" / "python" / "lib"
    other.mkdir(parents=True)
    foreign_pyspark = str(shutil.copy(PYSPARK_ZIP, other / "pyspark.zip"))
    foreign_py4j = str(other / "py4j-0.10.9.1-src.zip")
    Path(foreign_py4j).write_bytes(b"")
    path = [foreign_pyspark, foreign_py4j, SITE]
    assert drop_spark_zips(path) == []
    assert path == [foreign_pyspark, foreign_py4j, SITE]


def test_worker_python_runs_this_python_without_sparks_own_copies(tmp_path: Path, monkeypatch) -> None:
    """Spark's source runners and planners start from ``worker_python``: the path they get keeps
    every entry but the installed packages' own zips and the jar without Python, in order."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    script = worker_python()
    assert script != sys.executable and Path(script).parent == tmp_path / "cache" / "kappa"
    assert worker_python() == script  # the same script again, not another
    odd = str(tmp_path / "a dir with spaces") + ":" + str(tmp_path / "glob*")
    env = {**os.environ, "PYTHONPATH": f"{PYSPARK_ZIP}:{odd}:{PY4J_ZIP}:{SPARK_CORE}:{SITE}"}
    show = "import os, sys; print(os.environ['PYTHONPATH']); print(sys.executable)"
    out = subprocess.run([script, "-c", show], env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == [f"{odd}:{SITE}", sys.executable]
    env["PYTHONPATH"] = f"{PYSPARK_ZIP}:{PY4J_ZIP}"
    out = subprocess.run([script, "-c", "import os; print(os.environ.get('PYTHONPATH'))"],
                         env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["None"]


def test_worker_python_is_this_python_when_no_cache_can_be_written(tmp_path: Path, monkeypatch) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert worker_python() == sys.executable
