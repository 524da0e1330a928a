"""`make setup` refuses, with one line, a machine without Python 3.11 or Java 17."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check-prereqs.sh"


def _run(python: str, path: str, java_home: str = "") -> subprocess.CompletedProcess[str]:
    env = {"PATH": path, "JAVA_HOME": java_home} if java_home else {"PATH": path}
    return subprocess.run(["/bin/bash", str(SCRIPT), python], env=env, capture_output=True,
                          text=True, check=False)


def test_missing_java_is_one_clear_line(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    for tool in ("sed", "head"):
        (bin_dir / tool).symlink_to(f"/usr/bin/{tool}")
    result = _run(str(bin_dir / "python3"), str(bin_dir))
    assert result.returncode == 1
    assert result.stderr.strip() == ("error: Java 17 not found (no java on PATH, JAVA_HOME unset); "
                                     "install openjdk-17-jre-headless")


def test_wrong_python_is_refused(tmp_path):
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho 3.9\n")
    fake.chmod(0o755)
    result = _run(str(fake), "/usr/bin:/bin")
    assert result.returncode == 1
    assert "kappa needs Python 3.11" in result.stderr


def test_this_machine_passes():
    result = _run(sys.executable, "/usr/bin:/bin:/usr/local/bin")
    assert result.returncode == 0, result.stderr


def test_java_version_is_read_past_a_picked_up_options_line(monkeypatch):
    """The JVM prints "Picked up JAVA_TOOL_OPTIONS: ..." before its version when that is set (as in
    many container images); the check must still find the version (this machine's Java 17)."""
    from jobs.spark.java import java_version

    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Xss4m")
    major, line = java_version()
    assert major == 17
    assert 'version "17' in line
