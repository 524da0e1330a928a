"""`kappa serve` as an operator runs it: SIGTERM stops it cleanly and removes its registration."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import REPO, free_port


def test_sigterm_removes_the_pidfile(kappa_env, serve_topics, stack):
    port = free_port()
    env = {**os.environ, **kappa_env, "KAPPA_SERVE__ANALYZED_TOPIC": serve_topics["analyzed"],
           "KAPPA_SERVE__SUMMARIES_TOPIC": serve_topics["summaries"]}
    process = subprocess.Popen([sys.executable, "-m", "jobs.cli", "serve", "--port", str(port)],
                               cwd=REPO, env=env, stderr=subprocess.DEVNULL)
    pidfile = Path(kappa_env["KAPPA_STACK__DATA_DIR"]) / "run" / f"serve.{process.pid}.pid"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "kappa serve did not start"
            time.sleep(0.2)
        assert pidfile.exists()
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        assert not pidfile.exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
