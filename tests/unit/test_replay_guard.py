"""The replay pre-flight's guard: one replay of a topic at a time, released when its holder dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from jobs.config.load import load_config
from jobs.orchestration.ranges import OffsetRange, ReplayConflict, replay_guard

pytestmark = pytest.mark.unit

RANGE = OffsetRange("rsvps.raw", {0: 10, 1: 20}, {0: 110, 1: 120})
OTHER = OffsetRange("rsvps.raw", {0: 500}, {0: 600})  # not overlapping: still one at a time


def _cfg(tmp_path):
    return load_config("test", environ={"KAPPA_LAKE__CHECKPOINT_ROOT": str(tmp_path / "ckpt")})


def test_a_second_replay_of_the_topic_is_refused_naming_the_first(tmp_path):
    cfg = _cfg(tmp_path)
    with replay_guard(cfg, RANGE):
        with pytest.raises(ReplayConflict) as refused:
            with replay_guard(cfg, OTHER):
                pass
        message = str(refused.value)
        assert "another replay of rsvps.raw is running" in message
        held = json.loads(message.split("running (", 1)[1].split("); replays", 1)[0])
        assert held["pid"] == os.getpid() and held["start"] == {"0": 10, "1": 20}
        assert held["end"] == {"0": 110, "1": 120}
        with pytest.raises(ReplayConflict):  # a dry run checks too
            with replay_guard(cfg, RANGE, hold=False):
                pass
    with replay_guard(cfg, OTHER):  # released at the end of the first
        pass
    with replay_guard(cfg, OffsetRange("rsvps.other", {0: 0}, {0: 1})):  # other topics are free
        with replay_guard(cfg, RANGE):
            pass


def test_the_guard_of_a_killed_replay_is_free_again(tmp_path):
    cfg = _cfg(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from jobs.config.load import load_config\n"
        "from jobs.orchestration.ranges import OffsetRange, replay_guard\n"
        f"cfg = load_config('test', environ={{'KAPPA_LAKE__CHECKPOINT_ROOT': {str(tmp_path / 'ckpt')!r}}})\n"
        "with replay_guard(cfg, OffsetRange('rsvps.raw', {0: 1}, {0: 2})):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(60)\n")], stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ReplayConflict, match=f'"pid": {holder.pid}'):
            with replay_guard(cfg, RANGE):
                pass
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
    time.sleep(0.1)
    with replay_guard(cfg, RANGE):
        pass
