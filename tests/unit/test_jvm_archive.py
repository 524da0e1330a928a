"""When the local Spark driver maps the class archive, and that a half-written one is never used."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jobs.spark import jvm_archive
from jobs.spark_service import archive


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(jvm_archive.OFF_ENV, raising=False)
    return tmp_path / "kappa"


def test_the_option_names_the_archive_only_when_it_exists_and_is_not_off(cache: Path, monkeypatch) -> None:
    assert jvm_archive.java_option() == ""
    path = jvm_archive.archive_path()
    assert path.parent == cache and path.name.startswith("spark-cds-") and path.suffix == ".jsa"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    assert jvm_archive.java_option() == f"-XX:SharedArchiveFile={path}"
    monkeypatch.setenv(jvm_archive.OFF_ENV, "off")
    assert jvm_archive.java_option() == ""


@pytest.mark.parametrize("stdout", ["exit -9\n", "exit 1\n", ""])
def test_an_archive_whose_jvm_did_not_exit_cleanly_is_never_put_in_place(cache: Path, monkeypatch,
                                                                         stdout: str) -> None:
    """A JVM killed while it writes leaves a truncated archive, which would crash every later JVM."""
    real = subprocess.run

    def child(command, **kwargs):
        if "--dump" not in command:  # `java -version`
            return real(command, **kwargs)
        Path(command[-1]).write_bytes(b"half an archive")
        return subprocess.CompletedProcess(command, 0, stdout=stdout, stderr="")

    monkeypatch.setattr(archive.subprocess, "run", child)
    with pytest.raises(RuntimeError, match="did not exit cleanly"):
        archive.build()
    assert list(cache.iterdir()) == []
    assert archive.main([]) == 0  # `make setup` warns and goes on
