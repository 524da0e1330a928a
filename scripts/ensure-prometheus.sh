#!/usr/bin/env bash
# Make sure Debian's prometheus (prometheus, promtool) and prometheus-alertmanager are installed
# for the alert-rule tests (tests/unit/test_alert_rules.py) and `kappa monitor up`.
# No-op when promtool is on PATH; installs both packages with apt-get when run as root;
# otherwise prints what to do and exits 0 (the promtool tests then skip with that reason).
# Only the binaries are used: the packages' own services are stopped and not started at boot.
set -u
if command -v promtool >/dev/null 2>&1 && command -v prometheus-alertmanager >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "note: promtool is missing and this is not root; install it with" \
       "'sudo apt-get install -y prometheus prometheus-alertmanager' or the alert-rule tests will skip" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "note: promtool is missing and there is no apt-get; install Prometheus and Alertmanager" \
       "so that promtool, prometheus and alertmanager are on PATH, or the alert-rule tests will skip" >&2
  exit 0
fi
echo ".. installing Debian's prometheus and prometheus-alertmanager for the alert-rule tests (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
PKGS="prometheus prometheus-alertmanager"
if ! apt-get install -y --no-install-recommends $PKGS >/dev/null 2>&1; then
  apt-get update -qq >/dev/null 2>&1 || true
  if ! apt-get install -y --no-install-recommends $PKGS >/dev/null; then
    echo "error: apt-get install $PKGS failed; the alert-rule tests will skip" >&2
    exit 0
  fi
fi
# The packages start system services; the project runs its own instances on loopback.
for svc in prometheus prometheus-alertmanager prometheus-node-exporter; do
  if command -v service >/dev/null 2>&1; then service "$svc" stop >/dev/null 2>&1 || true; fi
done
echo ".. $(promtool --version 2>&1 | head -1)" >&2
