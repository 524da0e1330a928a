#!/usr/bin/env bash
# Fail early, with one readable line, when the machine lacks Python 3.11 or Java 17.
set -u
python=${1:-python3}
if ! command -v "$python" >/dev/null 2>&1; then
  echo "error: Python 3.11 not found (looked for python3.11 and python3); install Python 3.11" >&2
  exit 1
fi
version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$version" != "3.11" ]; then
  echo "error: $python is Python $version; kappa needs Python 3.11 (make PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
java=${JAVA_HOME:+$JAVA_HOME/bin/}java
if ! command -v "$java" >/dev/null 2>&1; then
  echo "error: Java 17 not found (no java on PATH, JAVA_HOME unset); install openjdk-17-jre-headless" >&2
  exit 1
fi
major=$("$java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
if [ "${major:-0}" -lt 17 ]; then
  echo "error: Java $major found; Spark 4 needs Java 17 or newer (set JAVA_HOME)" >&2
  exit 1
fi
