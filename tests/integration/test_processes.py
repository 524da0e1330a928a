"""The registry of the platform's own long-running processes (jobs.host.processes)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from jobs.config.load import load_config
from jobs.host.processes import alive, register_process, registered, stop_registered

CHILD = """
import signal, sys, time
from jobs.config.load import load_config
from jobs.host.processes import register_process
cfg = load_config("test", environ={}, overrides={"stack.data_dir": sys.argv[1]})
if sys.argv[2] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
with register_process(cfg, sys.argv[2]):
    print("ready", flush=True)
    time.sleep(60)
"""


def _config(tmp_path: Path):
    return load_config("test", environ={}, overrides={"stack.data_dir": str(tmp_path / "stack")})


def _child(tmp_path: Path, name: str) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "stack"), name],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def test_register_writes_pid_and_cmdline_then_removes_the_file(tmp_path):
    cfg = _config(tmp_path)
    with register_process(cfg, "streaming") as path:
        assert path.parent == tmp_path / "stack" / "run"
        assert path.name.startswith("streaming.") and path.name.endswith(".pid")
        entry = json.loads(path.read_text())
        assert entry["name"] == "streaming"
        assert "pytest" in entry["cmdline"]
        assert [item.name for item in registered(cfg)] == ["streaming"]
    assert not path.exists()


def test_stop_registered_terms_then_kills_and_spares_a_recycled_pid(tmp_path):
    cfg = _config(tmp_path)
    polite, stubborn = _child(tmp_path, "collector"), _child(tmp_path, "stubborn")
    bystander = subprocess.Popen(["sleep", "30"])
    fake = tmp_path / "stack" / "run" / f"serve.{bystander.pid}.pid"
    fake.write_text(json.dumps({"name": "serve", "pid": bystander.pid, "cmdline": "kappa serve"}))
    try:
        started = time.monotonic()
        stopped = stop_registered(cfg, grace_s=2.0, progress=lambda line: None)
        elapsed = time.monotonic() - started
        assert sorted(item.name for item in stopped) == ["collector", "stubborn"]
        assert polite.wait(5) == 0, "SIGTERM lets the process exit cleanly"
        assert stubborn.wait(5) == -9, "SIGKILL after the grace period"
        assert 2.0 <= elapsed < 10
        assert alive(bystander.pid), "a pid whose command line changed is never signalled"
        assert list((tmp_path / "stack" / "run").iterdir()) == []
    finally:
        for process in (polite, stubborn, bystander):
            process.kill()
            process.wait()


def test_stack_down_stops_the_collector_before_the_broker(tmp_path):
    """Issue 18 item 6: nothing the platform runs still produces while the broker stops."""
    import os

    import httpx

    from jobs.kafka.topics import apply_topics
    from jobs.stack.embedded import EmbeddedStack
    from tests.conftest import KAPPA, REPO, free_port

    env = {**os.environ, "KAPPA_ENV": "test", "COLUMNS": "200",
           "KAPPA_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
           "KAPPA_REDIS__PORT": str(free_port()),
           "KAPPA_STACK__DATA_DIR": str(tmp_path / "stack"),
           "KAPPA_COLLECTOR__LOG_PATH": str(tmp_path / "collector" / "log.sqlite")}
    cfg = load_config("test", environ=env)
    stack = EmbeddedStack(cfg)
    stack.up(progress=lambda line: None)
    port = free_port()
    collector = None
    try:
        apply_topics(cfg.kafka, cfg.topics)
        collector = subprocess.Popen([*KAPPA, "collect", "--http", "--port", str(port)], env=env,
                                     cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not registered(cfg):
            assert collector.poll() is None and time.monotonic() < deadline, "collector never registered"
            time.sleep(0.2)
        _wait_http(httpx, f"http://127.0.0.1:{port}/healthz", deadline)
        lines = Path(REPO / "data" / "sample" / "rsvps.jsonl").read_bytes().splitlines()[:20]
        posted = httpx.post(f"http://127.0.0.1:{port}/rsvps", content=b"\n".join(lines) + b"\n",
                            headers={"content-type": "application/x-ndjson"}, timeout=30)
        assert posted.status_code in (200, 207), posted.text  # 207: a malformed sample line
        down = subprocess.run([*KAPPA, "stack", "down"], env=env, cwd=REPO, capture_output=True,
                              text=True, timeout=120, check=False)
        assert down.returncode == 0, down.stderr
        order = [line.split(":")[0].strip(". ") for line in down.stderr.splitlines()
                 if "stopped pid" in line]
        assert order == ["collector", "kafka", "redis"], down.stderr
        assert collector.wait(5) == 0, "the collector exits cleanly on SIGTERM"
        assert list((tmp_path / "stack" / "run").iterdir()) == []
    finally:
        if collector is not None and collector.poll() is None:
            collector.kill()
            collector.wait()
        stack.down(progress=lambda line: None)


def _wait_http(httpx, url: str, deadline: float) -> None:
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{url} never answered"
        time.sleep(0.2)
