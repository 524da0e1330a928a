"""``kappa monitor up | down | status``: Prometheus and Alertmanager on loopback, for one machine.

Both run from Debian's packages (``prometheus``, ``prometheus-alertmanager``; ``make setup``
installs them) with the shipped rules (infra/monitoring/rules/kappa.rules.yml) and a scrape
config generated from conf/ (the exporter's, the collector's and serve's ports). Data, logs,
the generated config and pid files live under ``<stack.data_dir>/../monitoring`` (``var/monitoring``).
``down`` stops only the processes whose pid files ``up`` wrote.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from jobs.config.load import KappaConfig
from jobs.errors import KappaError
from jobs.host.processes import alive, cmdline, stop_group

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "infra" / "monitoring" / "rules" / "kappa.rules.yml"
SERVICES = {"prometheus": ("prometheus", 19090), "alertmanager": ("prometheus-alertmanager", 19093)}
READY_TIMEOUT_S = 30.0
Progress = Callable[[str], None]


class MonitorError(KappaError):
    """Local monitoring could not be started or read."""


def root(cfg: KappaConfig) -> Path:
    """Where local monitoring keeps its data, config, logs and pid files."""
    return Path(cfg.stack.data_dir).parent / "monitoring"


def free_port(preferred: int) -> int:
    """``preferred`` when it is free on 127.0.0.1, else any free port."""
    for port in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise MonitorError("no free port on 127.0.0.1")


def prometheus_config(cfg: KappaConfig, alertmanager_port: int | None, rules: Path = RULES,
                      scrape_interval: str = "15s") -> dict[str, Any]:
    """The scrape config of this machine's tiers (ports from conf/) with the given rule file."""
    def job(name: str, port: int) -> dict[str, Any]:
        return {"job_name": name, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}

    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "rule_files": [str(rules)],
        "scrape_configs": [job("kappa-exporter", cfg.monitoring.port),
                           job("kappa-collector", cfg.collector.port), job("kappa-serve", cfg.serve.port)],
    }
    if alertmanager_port is not None:
        config["alerting"] = {"alertmanagers": [{"static_configs": [
            {"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]}
    return config


def start_prometheus(config: dict[str, Any], where: Path, port: int) -> subprocess.Popen[bytes]:
    """Start Prometheus on 127.0.0.1:``port`` with ``config``, its data under ``where``."""
    binary = _binary("prometheus")
    where.mkdir(parents=True, exist_ok=True)
    (where / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    log = (where / "prometheus.log").open("ab")
    return subprocess.Popen(
        [binary, f"--config.file={where / 'prometheus.yml'}", f"--storage.tsdb.path={where / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def _start_alertmanager(where: Path, port: int) -> subprocess.Popen[bytes]:
    binary = _binary("prometheus-alertmanager")
    (where / "alertmanager.yml").write_text(yaml.safe_dump(
        {"route": {"receiver": "log"}, "receivers": [{"name": "log"}]}))
    log = (where / "alertmanager.log").open("ab")
    return subprocess.Popen(
        [binary, f"--config.file={where / 'alertmanager.yml'}", f"--storage.path={where / 'alertmanager'}",
         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise MonitorError(f"{name} is not installed; run `make setup` (scripts/ensure-prometheus.sh) or "
                           f"`apt-get install prometheus prometheus-alertmanager`")
    return found


def wait_ready(port: int, process: subprocess.Popen[bytes], name: str, log: Path) -> None:
    """Wait until ``/-/ready`` answers 200; fail naming the log when the process exits or times out."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise MonitorError(f"{name} exited during start (code {process.returncode}); see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise MonitorError(f"{name} did not become ready on 127.0.0.1:{port} in {READY_TIMEOUT_S:g} s; see {log}")


def status(cfg: KappaConfig) -> dict[str, Any]:
    """Each service: running or not, its pid and URL; Prometheus's firing alerts."""
    out: dict[str, Any] = {"root": str(root(cfg))}
    for name, (binary, _) in SERVICES.items():
        record = _record(cfg, name)
        running = record is not None and alive(record["pid"]) and binary in cmdline(record["pid"])
        out[name] = {"running": running, **({"pid": record["pid"], "url": record["url"]} if record else {})}
    if out["prometheus"]["running"]:
        try:
            with urllib.request.urlopen(out["prometheus"]["url"] + "/api/v1/alerts", timeout=5) as response:
                alerts = json.loads(response.read())["data"]["alerts"]
            out["firing"] = sorted({a["labels"]["alertname"] for a in alerts if a["state"] == "firing"})
        except (OSError, ValueError, KeyError):
            out["firing"] = None
    return out


def up(cfg: KappaConfig, progress: Progress) -> dict[str, Any]:
    """Start Prometheus and Alertmanager (each unless already running); return :func:`status`."""
    where = root(cfg)
    where.mkdir(parents=True, exist_ok=True)
    current = status(cfg)
    ports: dict[str, int] = {}
    for name in ("alertmanager", "prometheus"):
        if current[name]["running"]:
            progress(f"{name} already runs (pid {current[name]['pid']}) at {current[name]['url']}")
            ports[name] = int(current[name]["url"].rsplit(":", 1)[1])
            continue
        port = free_port(SERVICES[name][1])
        if name == "alertmanager":
            process = _start_alertmanager(where, port)
        else:
            process = start_prometheus(prometheus_config(cfg, ports["alertmanager"]), where, port)
        url = f"http://127.0.0.1:{port}"
        (where / f"{name}.pid").write_text(json.dumps({"pid": process.pid, "url": url}))
        wait_ready(port, process, name, where / f"{name}.log")
        ports[name] = port
        progress(f"{name} runs (pid {process.pid}) at {url}")
    return status(cfg)


def down(cfg: KappaConfig, progress: Progress) -> list[str]:
    """Stop the services ``up`` started (by their pid files); return their names."""
    stopped = []
    for name, (binary, _) in SERVICES.items():
        record = _record(cfg, name)
        if record is None:
            continue
        if alive(record["pid"]) and binary in cmdline(record["pid"]):
            stop_group(record["pid"])
            stopped.append(name)
            progress(f"stopped {name} (pid {record['pid']})")
        (root(cfg) / f"{name}.pid").unlink(missing_ok=True)
    return stopped


def _record(cfg: KappaConfig, name: str) -> dict[str, Any] | None:
    path = root(cfg) / f"{name}.pid"
    try:
        record: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record


def doctor_check(cfg: KappaConfig) -> dict[str, Any]:
    """``kappa doctor``'s monitoring line (informational: monitoring is optional on one machine)."""
    if shutil.which("prometheus") is None:
        return {"name": "monitoring", "ok": True,
                "detail": "Prometheus not installed (make setup installs it); kappa monitor up needs it"}
    report = status(cfg)
    if not report["prometheus"]["running"]:
        return {"name": "monitoring", "ok": True, "detail": "not running (kappa monitor up starts it)"}
    firing = report.get("firing")
    alerts = "alerts unreadable" if firing is None else f"firing: {', '.join(firing) or 'none'}"
    where = report["prometheus"]["url"]
    return {"name": "monitoring", "ok": True, "detail": f"Prometheus at {where}, {alerts}"}
