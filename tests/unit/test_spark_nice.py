"""The Spark service's niceness helpers (jobs/spark/service_state.py) on real processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from jobs.spark.service_state import can_lower_nice, set_tree_nice

PROBE = "from jobs.spark.service_state import can_lower_nice; print(can_lower_nice())"
TREE = ("import subprocess, sys, threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); print('up', flush=True); "
        "time.sleep(60)")


def _children(root: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(root)], capture_output=True, text=True, check=False)
    return [int(pid) for pid in found.stdout.split()]


def _nices(root: int) -> set[int]:
    """The niceness of every thread of ``root`` and of its children."""
    return {os.getpriority(os.PRIO_PROCESS, int(tid))
            for pid in [root, *_children(root)] for tid in os.listdir(f"/proc/{pid}/task")}


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_the_probe_tells_whether_the_process_may_lower_its_niceness():
    with_cap = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    without = subprocess.run(["setpriv", "--bounding-set", "-sys_nice", sys.executable, "-c", PROBE],
                             capture_output=True, text=True, check=True)
    assert (with_cap.stdout.strip(), without.stdout.strip()) == ("True", "False")


@pytest.mark.skipif(not can_lower_nice(), reason="lowering a niceness needs CAP_SYS_NICE")
def test_set_tree_nice_sets_every_thread_of_the_tree_both_ways():
    tree = subprocess.Popen(["nice", "-n", "5", sys.executable, "-c", TREE], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert tree.stdout is not None and tree.stdout.readline() == "up\n"
        time.sleep(0.2)  # the grandchild's interpreter is up
        assert _nices(tree.pid) == {5}
        assert set_tree_nice(tree.pid, 2) == []
        assert _nices(tree.pid) == {2}
        assert set_tree_nice(tree.pid, 7) == []
        assert _nices(tree.pid) == {7}
    finally:
        for child in _children(tree.pid):
            os.kill(child, signal.SIGKILL)
        tree.kill()
        tree.wait()
