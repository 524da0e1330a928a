"""Bytecode inside pyspark's own zips, so Spark's Python processes stop compiling pyspark.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and the py4j zip first on the ``PYTHONPATH`` of
every Python process it starts (workers, and the daemons of the data source planner and the
streaming source runner). Python imports pyspark from that zip, and the zip holds only sources:
``zipimport`` compiles every module on every import and can write no bytecode back. Measured here:
importing ``pyspark.sql`` from the zip costs 0.8-1.1 s of CPU against 0.3 s from the installed
package's bytecode, in each of the about seven Python processes a query starts.

``make setup`` runs this module: it rewrites each zip with a compiled ``<module>.pyc`` beside each
``<module>.py`` (the legacy location ``zipimport`` looks at first). The bytecode is hash-checked:
Python compares it with the source in the same zip on every import and compiles the source when
they differ, and falls back to the source for another Python version (another magic number). The
rewrite goes to a new file that replaces the old one (the installed zip may be a hard link into
uv's cache, which must not change) and is skipped for a zip that already has this Python's
bytecode. Reinstalling pyspark brings back the plain zip: slower, still correct.

    .venv/bin/python -m jobs.spark.bytecode
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import zipfile
from importlib._bootstrap_external import _code_to_hash_pyc  # type: ignore[attr-defined]
from pathlib import Path

MARKER = "kappa-bytecode.txt"


def spark_zips() -> list[Path]:
    """The zips Spark puts on its Python processes' path, from the installed pyspark."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SystemExit("error: pyspark is not installed in this Python; run `make setup`")
    lib = Path(spec.origin).parent / "python" / "lib"
    return sorted(lib.glob("*.zip"))


def marker_text() -> str:
    """What the marker entry holds: this Python's bytecode magic number."""
    return importlib.util.MAGIC_NUMBER.hex()


def has_bytecode(path: Path) -> bool:
    """Whether the zip already holds this Python's bytecode (written by :func:`add_bytecode`)."""
    with zipfile.ZipFile(path) as archive:
        try:
            return archive.read(MARKER).decode() == marker_text()
        except KeyError:
            return False


def add_bytecode(path: Path) -> int:
    """Rewrite the zip with a hash-checked ``.pyc`` beside each ``.py``; return how many."""
    compiled = 0
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(path) as source, zipfile.ZipFile(temp, "w", zipfile.ZIP_DEFLATED) as target:
            for info in source.infolist():
                if info.filename.endswith(".pyc") or info.filename == MARKER:
                    continue  # an older run's bytecode (another Python) is replaced
                data = source.read(info)
                target.writestr(info, data)
                if not info.filename.endswith(".py"):
                    continue
                try:
                    code = compile(data, f"{path}{os.sep}{info.filename}", "exec", dont_inherit=True)
                except SyntaxError:
                    continue  # zipimport compiles it (and reports the error) as before
                pyc = _code_to_hash_pyc(code, importlib.util.source_hash(data), checked=True)
                entry = zipfile.ZipInfo(info.filename + "c", date_time=info.date_time)
                entry.compress_type = zipfile.ZIP_DEFLATED
                target.writestr(entry, bytes(pyc))
                compiled += 1
            target.writestr(MARKER, marker_text())
        os.chmod(temp, path.stat().st_mode & 0o777)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return compiled


def main(argv: list[str] | None = None) -> int:
    """Add bytecode to every zip that lacks this Python's; a zip that cannot be rewritten warns."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("zips", nargs="*", type=Path, help="default: pyspark's python/lib/*.zip")
    args = parser.parse_args(argv)
    for path in args.zips or spark_zips():
        try:
            if has_bytecode(path):
                continue
            count = add_bytecode(path)
        except (OSError, zipfile.BadZipFile) as exc:
            print(f"warning: no bytecode added to {path}: {exc} (Spark still works, its Python "
                  "processes start slower)", file=sys.stderr)
            continue
        print(f".. bytecode for {count} modules in {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
