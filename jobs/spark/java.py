"""The Java that Spark starts: its version, and the least one Spark 4 runs on."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from jobs.errors import KappaError

JAVA_MAJOR = 17


def java_version() -> tuple[int, str]:
    """The major version and version line of the ``java`` Spark will start."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise KappaError(f"Java {JAVA_MAJOR} not found (no java on PATH, JAVA_HOME unset); "
                         "install openjdk-17-jre-headless or set JAVA_HOME")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    lines = (out.stderr or out.stdout).splitlines()
    # the version line is not always the first: "Picked up JAVA_TOOL_OPTIONS: ..." may come before
    line = next((x for x in lines if re.search(r'version "', x)), lines[0] if lines else "")
    match = re.search(r'version "(\d+)(?:\.(\d+))?', line)
    if not match:
        raise KappaError(f"could not read the Java version from {java!r}: {line!r}")
    major = int(match.group(1)) if match.group(1) != "1" else int(match.group(2) or 0)
    return major, line
