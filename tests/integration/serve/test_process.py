"""`kappa serve` as an operator runs it: SIGTERM stops it cleanly and removes its registration."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from jobs.errors import KappaError
from jobs.serve.server import ServerThread
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


def test_a_missing_topic_is_one_line_and_exit_1(kappa_env, stack):
    env = {**os.environ, **kappa_env, "KAPPA_SERVE__ANALYZED_TOPIC": "no.such.topic"}
    done = subprocess.run([sys.executable, "-m", "jobs.cli", "serve", "--port", str(free_port())],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "'no.such.topic' is not readable" in errors[0], done.stderr
    assert "kappa topics apply" in errors[0]
    pidfiles = list((Path(kappa_env["KAPPA_STACK__DATA_DIR"]) / "run").glob("serve.*.pid"))
    assert not pidfiles, pidfiles


def test_a_serve_thread_that_cannot_start_says_why(serve_config):
    server = ServerThread(serve_config(summaries_topic="no.such.summaries"))
    with pytest.raises(KappaError, match=r"could not start: topic 'no\.such\.summaries' is not readable"):
        server.start()
    assert not server._thread.is_alive()  # the server stopped itself; no thread left behind
