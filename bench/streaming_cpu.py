"""CPU and memory of a benchmark's processes (bench/streaming.py and its siblings): CPU by kind of
process, the embedded broker's settling after writes, peak RSS and PSS sampled in a thread."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and every descendant, reaped ones included."""
    return sum(cpu_by_kind().values())


def cpu_by_kind() -> dict[str, float]:
    """:func:`cpu_seconds` by process: ``this`` (the benchmark and the driver's Python), ``jvm``
    (the driver JVM), ``py_workers`` (the Python workers, reaped ones included), ``broker``,
    ``redis``."""
    me = psutil.Process()
    totals = dict.fromkeys(("this", "jvm", "py_workers", "broker", "redis"), 0.0)
    for proc in [me, *me.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            name = proc.name()
            broker = proc.pid != me.pid and _is_broker(proc)
        except psutil.Error:
            continue
        own, reaped = t.user + t.system, t.children_user + t.children_system
        if proc.pid == me.pid:
            totals["this"] += own + reaped
        elif broker:
            totals["broker"] += own + reaped
        elif "redis" in name:
            totals["redis"] += own + reaped
        elif "java" in name:
            totals["jvm"] += own
            totals["py_workers"] += reaped  # the Python workers that exited
        else:
            totals["py_workers"] += own + reaped
    return totals


MACHINE_KINDS = (("noida", "broker"), ("redis-server", "redis"), ("spark_service", "spark_service"),
         ("daemon", "python_workers"), ("java", "jvm"), ("serve", "serve"))


class MachineCpu:
    """CPU seconds the run's own processes used since this was made, by kind (:data:`MACHINE_KINDS`,
    by command line), each with its reaped children (a Spark daemon's exited workers).

    A run's own processes are this process's descendants (the timed command, a ``kappa serve`` the
    benchmark started) and the services it uses, given by pid in ``services`` (the stack's broker
    and Redis, the Spark service) with their descendants: other users' JVMs, brokers and Redis
    servers on the machine are never counted. Counted per process: one started meanwhile counts
    whole, one that exits is counted up to the last :meth:`sample` that saw it (sample often: the
    runs' processes come and go). ``command``: this process's reaped children (the runs it timed).
    """

    def __init__(self, services: Iterable[int] = ()) -> None:
        self._first: dict[tuple[int, float], float] = {}
        self._last: dict[tuple[int, float], tuple[str, float]] = {}
        self._me = psutil.Process()
        self._roots = {self._me.pid, *services}
        self._mine = self._own()
        self.sample(first=True)

    def _own(self) -> float:
        t = self._me.cpu_times()
        return t.children_user + t.children_system

    def _owned(self) -> list[psutil.Process]:
        """The root processes and their descendants (this process left out)."""
        found: dict[int, psutil.Process] = {}
        for pid in self._roots:
            try:
                root = psutil.Process(pid)
                found.update({p.pid: p for p in (root, *root.children(recursive=True))})
            except psutil.Error:
                continue
        found.pop(self._me.pid, None)
        return list(found.values())

    def sample(self, first: bool = False) -> None:
        """Read the CPU of the run's own processes now."""
        for proc in self._owned():
            try:
                line, t, born = " ".join(proc.cmdline()[:4]), proc.cpu_times(), proc.create_time()
            except psutil.Error:
                continue
            kind = next((kind for needle, kind in MACHINE_KINDS if needle in line), None)
            if kind is None:
                continue
            used = t.user + t.system + t.children_user + t.children_system
            if first:
                self._first[(proc.pid, born)] = used
            self._last[(proc.pid, born)] = (kind, used)

    def by_kind(self) -> dict[str, float]:
        """What each kind used since this was made, as of a sample taken now."""
        self.sample()
        totals = {kind: 0.0 for _, kind in MACHINE_KINDS} | {"command": self._own() - self._mine}
        for key, (kind, used) in self._last.items():
            totals[kind] += used - self._first.get(key, 0.0)
        return {kind: round(value, 2) for kind, value in totals.items()}


def service_pids(cfg: Any) -> list[int]:
    """The pids of the services a run on ``cfg`` uses: the embedded stack's and the Spark service."""
    from jobs.spark.service_state import read_state

    pids = []
    for pidfile in Path(cfg.stack.data_dir).glob("*.pid"):
        try:
            pids.append(int(pidfile.read_text().strip()))
        except (OSError, ValueError):
            continue
    state = read_state(cfg)
    if state is not None:
        pids.append(state.pid)
    return pids


def with_cpu(run: Callable[[], dict[str, Any]], overhead: Callable[[], float] = lambda: 0.0
             ) -> dict[str, Any]:
    """``run()``'s result plus the CPU it (and the broker, a descendant) used per event.

    The other processes' CPU is counted until the embedded broker has settled after the run
    (:func:`settle`), so the work a run's writes leave the broker is charged to that run and not to
    the next one. This process (``this``: the benchmark and, for the job, the driver's Python) is
    counted only while ``run()`` runs, less ``overhead()``, the CPU of the benchmark's own
    sampling thread (:attr:`RssSampler.cpu_s`): neither the settle wait nor the RSS sampling is
    the job's or the loop's work.
    """
    before, spent = cpu_by_kind(), overhead()
    result = run()
    this = cpu_by_kind()["this"] - before["this"] - (overhead() - spent)
    result["broker_settle_s"] = settle()
    after = cpu_by_kind()
    parts = {kind: after[kind] - before[kind] for kind in after} | {"this": max(this, 0.0)}
    cpu = sum(parts.values())
    result |= {"cpu_s": round(cpu, 1), "cpu_us_per_event": round(cpu / result["records"] * 1e6, 1),
               "cpu_us_per_event_by_process": {kind: round(value / result["records"] * 1e6, 1)
                                               for kind, value in parts.items()}}
    return result


def settle(quiet: float = 0.05, limit_s: float = 120.0) -> float:
    """Wait until the embedded broker (a descendant) used under ``quiet`` of a core for 1 s.

    Measured: after any write, noida-db rewrites its whole state as one JSON file (about 4 s of
    CPU after 100k records were produced to an empty broker, over a minute for a 7 GB state) with
    no client connected; run right after a phase that wrote to it, the next phase would share the
    machine with that work. Returns the seconds waited (0 when no broker is a descendant).
    """
    began = time.monotonic()
    if not any(_is_broker(p) for p in psutil.Process().children(recursive=True)):
        return 0.0
    while time.monotonic() - began < limit_s:
        before = cpu_by_kind()["broker"]
        time.sleep(1.0)
        if cpu_by_kind()["broker"] - before < quiet:
            break
    return round(time.monotonic() - began, 1)


def _is_broker(proc: psutil.Process) -> bool:
    try:
        return any("noida" in part for part in proc.cmdline()[:2])
    except psutil.Error:
        return False


class Sampler:
    """A daemon thread that runs :meth:`_run` until :meth:`stop`."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        """Begin sampling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join(120)

    def _run(self) -> None:
        raise NotImplementedError


class RssSampler(Sampler):
    """Peak RSS of the driver JVM + its descendants (and of each part), and of this process.

    Sampled every 0.2 s; each part's peak is its own, so ``jvm`` + ``python_workers`` can exceed
    ``jvm_and_python_workers`` (their peaks need not coincide). The ``*_pss`` peaks sum the
    proportional set size instead: the Python workers are forked from one daemon and share its
    pages (interpreter, pyarrow, pandas), which an RSS sum counts once per worker and a PSS sum
    once in all.
    """

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.peak = {"jvm_and_python_workers": 0, "jvm": 0, "python_workers": 0,
                     "driver_python_and_bench": 0, "total": 0, "jvm_and_python_workers_pss": 0,
                     "python_workers_pss": 0}
        self.workers_peak = 0
        self.at_peak: list[tuple[str, int]] = []
        """Each process's RSS (MiB) in the sample where JVM + workers peaked, largest first."""
        self.cpu_s = 0.0
        """CPU seconds the sampling thread has used (subtracted from the runs' CPU by with_cpu)."""
        super().__init__()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                jvm = workers = jvm_pss = workers_pss = 0
                parts: list[tuple[str, int]] = []
                for child in self.me.children():
                    if child.name() != "java":
                        continue
                    jvm += child.memory_info().rss
                    jvm_pss += _pss(child)
                    parts.append(("jvm", child.memory_info().rss))
                    for sub in child.children(recursive=True):
                        try:
                            rss = sub.memory_info().rss
                            workers += rss
                            workers_pss += _pss(sub)
                            parts.append((_worker_role(sub), rss))
                        except psutil.NoSuchProcess:
                            pass
                tree = jvm + workers
                if tree > self.peak["jvm_and_python_workers"]:
                    self.at_peak = sorted(((name, round(rss / 2**20)) for name, rss in parts),
                                          key=lambda part: -part[1])
                mine = self.me.memory_info().rss
                for name, value in (("jvm_and_python_workers", tree), ("jvm", jvm),
                                    ("python_workers", workers), ("driver_python_and_bench", mine),
                                    ("total", tree + mine), ("python_workers_pss", workers_pss),
                                    ("jvm_and_python_workers_pss", jvm_pss + workers_pss)):
                    self.peak[name] = max(self.peak[name], value)
            except psutil.Error:
                pass
            self.cpu_s = time.thread_time()
            time.sleep(0.2)

    def peaks(self) -> dict[str, Any]:
        """Peak MiB per group."""
        return ({name: round(value / 2**20) for name, value in self.peak.items()}
                | {"at_peak_by_process": [f"{name} {mb}" for name, mb in self.at_peak]})


def _worker_role(process: psutil.Process) -> str:
    """What a JVM descendant is: a Python worker or daemon by its module, else its name."""
    try:
        cmd = process.cmdline()
    except psutil.Error:
        return process.name()
    if "-m" in cmd and cmd.index("-m") + 1 < len(cmd):
        module, rest = cmd[cmd.index("-m") + 1], cmd[cmd.index("-m") + 2:]
        return module + (f" {rest[0].rsplit('.', 1)[-1]}" if rest else "")
    return process.name()


def _pss(process: psutil.Process) -> int:
    """Proportional set size (/proc/<pid>/smaps_rollup); 0 where the kernel does not tell."""
    try:
        return int(getattr(process.memory_full_info(), "pss", 0))
    except psutil.AccessDenied:
        return 0


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
