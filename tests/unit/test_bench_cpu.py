"""The replay benchmark's CPU by kind counts the run's own processes, never other users' ones."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil

BENCH = Path(__file__).resolve().parents[2] / "bench"
BUSY = "import sys, time\nend = time.time() + float(sys.argv[1])\nwhile time.time() < end:\n    pass\n"


MEASURE = """import json, subprocess, sys, time
import psutil
sys.path.insert(0, sys.argv[1])
from streaming_cpu import MachineCpu
cpu = MachineCpu()
own = subprocess.Popen(["bash", "-c", sys.argv[2]])
proc = psutil.Process(own.pid)
time.sleep(1.0)
cpu.sample()
t = proc.cpu_times()
print(json.dumps([cpu.by_kind()["jvm"], t.user + t.system]))
own.wait(timeout=10)
"""


def _busy_as_java(script: Path, seconds: float) -> str:
    """A shell command: a busy loop whose command line starts with ``java`` (the kind ``jvm``)."""
    return f"exec -a java {sys.executable} {script} {seconds}"


def _cpu(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def test_a_java_process_outside_the_run_is_not_counted_and_the_runs_own_is(tmp_path: Path) -> None:
    script = tmp_path / "busy.py"
    script.write_text(BUSY)
    # another user's JVM: started by a shell that exits, so it is nobody's descendant here
    subprocess.run(["bash", "-c", f"({_busy_as_java(script, 2.5)}) >/dev/null 2>&1 &"], check=True)
    time.sleep(0.2)
    mine = {p.pid for p in psutil.Process().children(recursive=True)}
    [outsider] = [p for p in psutil.process_iter(["cmdline"])
                  if (p.info["cmdline"] or [""])[0] == "java" and "2.5" in " ".join(p.info["cmdline"])
                  and p.pid not in mine]
    outsider_before = _cpu(outsider)
    # measured in a process of its own: this test's process may have children of its own (a
    # pytest worker's SparkSession JVM) that are part of no run
    measure = tmp_path / "measure.py"
    measure.write_text(MEASURE)
    done = subprocess.run([sys.executable, str(measure), str(BENCH), _busy_as_java(script, 1.5)],
                          capture_output=True, text=True, timeout=60, check=True)
    counted, own_used = json.loads(done.stdout)
    outsider_used = _cpu(outsider) - outsider_before
    outsider.wait(timeout=10)
    assert outsider_used > 0.15   # what counting it would add
    assert own_used - 0.15 < counted < own_used + 0.1, (counted, own_used, outsider_used)
