"""A streaming driver killed with SIGKILL mid-stream and restarted delivers every record once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

DRIVER = Path(__file__).with_name("driver.py")
REPO = Path(__file__).resolve().parents[3]


def start_driver(kappa_env, topic: str, checkpoint: Path, out: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, **kappa_env}
    with log.open("ab") as sink:
        return subprocess.Popen([sys.executable, str(DRIVER), topic, str(checkpoint), str(out), "100"],
                                cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the driver and everything it started (its JVM and Python workers)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(30)


def delivered(out: Path) -> list[tuple[int, int, str]]:
    return [tuple(row) for path in sorted(out.glob("batch-*.json"))
            for row in json.loads(path.read_text())]


def wait_for(condition, timeout: float, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, f"driver exited early:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


@pytest.mark.slow
def test_sigkill_mid_stream_then_restart_delivers_every_record_once(kappa_env, stack, topic_factory,
                                                                     produce, tmp_path):
    topic = topic_factory()
    checkpoint, out, log = tmp_path / "checkpoint", tmp_path / "out", tmp_path / "driver.log"
    records = produce(topic, 600)
    first = start_driver(kappa_env, topic, checkpoint, out, log)
    try:
        wait_for(lambda: len(list(out.glob("batch-*.json"))) >= 2, 120, first, log)
    finally:
        kill_group(first)
    before_restart = delivered(out)
    assert 0 < len(before_restart) < len(records), "the kill must happen mid-stream"

    records += produce(topic, 150, start=600)
    second = start_driver(kappa_env, topic, checkpoint, out, log)
    try:
        wait_for(lambda: len(delivered(out)) >= len(records), 120, second, log)
        time.sleep(1)
    finally:
        kill_group(second)

    rows = delivered(out)
    positions = [(partition, offset) for partition, offset, _ in rows]
    assert len(positions) == len(set(positions)), "a record was delivered twice"
    assert sorted(rows) == sorted((r.partition, r.offset, r.value.decode()) for r in records)
