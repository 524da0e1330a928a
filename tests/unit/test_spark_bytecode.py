"""Bytecode in pyspark's zips (jobs/spark/bytecode.py), on small zips built here."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from jobs.spark.bytecode import MARKER, add_bytecode, has_bytecode, main, spark_zips


def _zip(path, files):
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


def _import(path, module):
    """Import ``module`` from the zip in a fresh Python; print its value and its file."""
    code = (f"import sys; sys.path.insert(0, {str(path)!r}); import {module} as m; "
            "print(m.VALUE, m.__file__.rsplit('.', 1)[1])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return result.stdout.split()


def test_every_module_gets_bytecode_that_python_then_loads(tmp_path):
    path = _zip(tmp_path / "lib.zip", {"pkg/__init__.py": "VALUE = 'init'\n",
                                       "pkg/mod.py": "VALUE = 41 + 1\n", "pkg/data.txt": "x"})
    assert add_bytecode(path) == 2
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
    assert names == {"pkg/__init__.py", "pkg/__init__.pyc", "pkg/mod.py", "pkg/mod.pyc", "pkg/data.txt",
                     MARKER}
    assert _import(path, "pkg.mod") == ["42", "pyc"]
    assert _import(path, "pkg") == ["init", "pyc"]


def test_bytecode_of_a_changed_source_is_not_used(tmp_path):
    path = _zip(tmp_path / "lib.zip", {"mod.py": "VALUE = 1\n"})
    add_bytecode(path)
    with zipfile.ZipFile(path) as archive:
        stale = archive.read("mod.pyc")
    _zip(path, {"mod.py": "VALUE = 2\n", "mod.pyc": stale})  # the source changed, not its bytecode
    assert _import(path, "mod")[0] == "2"


def test_a_second_run_leaves_the_zip_alone_and_bad_sources_are_kept(tmp_path):
    path = _zip(tmp_path / "lib.zip", {"good.py": "VALUE = 'ok'\n", "bad.py": "def (:\n"})
    assert not has_bytecode(path)
    assert main([str(path)]) == 0
    assert has_bytecode(path)
    before = path.stat()
    assert main([str(path)]) == 0
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    with zipfile.ZipFile(path) as archive:
        assert {"good.pyc", "bad.py"} <= set(archive.namelist()) and "bad.pyc" not in archive.namelist()


def test_the_rewrite_does_not_change_a_hard_linked_original(tmp_path):
    """uv installs packages as hard links into its cache: the cache's copy must stay as it was."""
    path = _zip(tmp_path / "lib.zip", {"mod.py": "VALUE = 1\n"})
    cache = tmp_path / "cache.zip"
    cache.hardlink_to(path)
    original = cache.read_bytes()
    add_bytecode(path)
    assert cache.read_bytes() == original
    assert path.read_bytes() != original


def test_the_installed_pyspark_zips_are_found():
    names = {path.name for path in spark_zips()}
    assert "pyspark.zip" in names and any(name.startswith("py4j-") for name in names)


def test_a_broken_zip_is_a_warning_not_a_failed_setup(tmp_path, capsys):
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"not a zip")
    assert main([str(broken)]) == 0
    assert f"warning: no bytecode added to {broken}" in capsys.readouterr().err
    assert broken.read_bytes() == b"not a zip"
