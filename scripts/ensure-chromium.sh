#!/usr/bin/env bash
# Make sure Debian's chromium is installed for the browser tests (tests/integration/serve).
# No-op when /usr/bin/chromium exists; installs it with apt-get when run as root; otherwise
# prints what to do and exits 0 (the browser tests then skip with that reason).
set -u
CHROMIUM=${KAPPA_CHROMIUM:-/usr/bin/chromium}
if [ -x "$CHROMIUM" ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "note: $CHROMIUM is missing and this is not root; install it with" \
       "'sudo apt-get install -y chromium' or the dashboard browser test will skip" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "note: $CHROMIUM is missing and there is no apt-get; install Chromium and set" \
       "KAPPA_CHROMIUM to its path, or the dashboard browser test will skip" >&2
  exit 0
fi
echo ".. installing Debian's chromium for the dashboard browser test (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends chromium >/dev/null 2>&1; then
  apt-get update -qq >/dev/null 2>&1 || true
  if ! apt-get install -y --no-install-recommends chromium >/dev/null; then
    echo "error: apt-get install chromium failed; the dashboard browser test will skip" >&2
    exit 0
  fi
fi
echo ".. chromium installed: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")" >&2
