"""Idle CPU of `kappa metrics serve` (and `kappa serve`) with a Prometheus scraping every 15 s.

Starts a private embedded stack with `kappa serve` on it (bench/serve.py's platform), the
exporter on a free port, and Debian's Prometheus scraping both every --scrape-interval with the
shipped rules; lets it settle, then samples the CPU time (user + system, psutil) of the exporter,
serve and Prometheus over --seconds. Prints JSON; the exporter must stay under 2 % of a core.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.serve import free_port, platform
from bench.serve_idle import cpu_seconds
from jobs.config.load import load_config
from jobs.monitoring.local import RULES, prometheus_config, start_prometheus, wait_ready

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--settle-seconds", type=float, default=20)
    parser.add_argument("--scrape-interval", default="15s")
    args = parser.parse_args()
    with platform() as (serve_port, _props, server, _broker, env), \
            tempfile.TemporaryDirectory(prefix="kappa-prom-") as folder:
        exporter_port, prom_port = free_port(), free_port()
        full_env = {**os.environ, **env, "KAPPA_ENV": "test", "KAPPA_MONITORING__PORT": str(exporter_port),
                    "KAPPA_SERVE__PORT": str(serve_port)}
        exporter = subprocess.Popen([sys.executable, "-m", "jobs.cli", "metrics", "serve"], cwd=REPO,
                                    env=full_env, stderr=subprocess.DEVNULL)
        cfg = load_config("test", environ=full_env)
        prometheus = start_prometheus(prometheus_config(cfg, None, RULES, args.scrape_interval),
                                      Path(folder), prom_port)
        try:
            wait_ready(prom_port, prometheus, "prometheus", Path(folder) / "prometheus.log")
            time.sleep(args.settle_seconds)
            procs = {"exporter": exporter.pid, "serve": server.pid, "prometheus": prometheus.pid}
            before = {name: cpu_seconds(pid) for name, pid in procs.items()}
            began = time.monotonic()
            time.sleep(args.seconds)
            elapsed = time.monotonic() - began
            used = {f"{name}_core": round((cpu_seconds(pid) - before[name]) / elapsed, 4)
                    for name, pid in procs.items()}
            url = f"http://127.0.0.1:{prom_port}/api/v1/targets"
            with urllib.request.urlopen(url, timeout=5) as response:
                targets = json.loads(response.read())["data"]["activeTargets"]
            health = {t["labels"]["job"]: t["health"] for t in targets}
            print(json.dumps({"seconds": round(elapsed, 1), "scrape_interval": args.scrape_interval,
                              **used, "targets": health}, indent=2))
        finally:
            for proc in (prometheus, exporter):
                proc.terminate()
                proc.wait(timeout=30)


if __name__ == "__main__":
    main()
