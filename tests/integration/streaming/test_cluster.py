"""The cluster path: the job spark-submitted to a Spark standalone master and worker (started
from the pip package's ``spark-class`` on loopback) writes the same Redis summaries as the same
replay in local mode.

The executors must import the shipped zip, not this repository: the worker runs without
PYTHONPATH and outside the repository, and its Python workers start through a wrapper that runs
the venv's interpreter with ``-S`` (no site processing, so the editable install's import hook
that maps ``jobs`` to the repository is not loaded) and only the venv's site-packages added.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobs.config.load import KappaConfig
from jobs.spark.submit import build_submit, package_code
from jobs.streaming.job import RunSpec, run_stream
from pipelines.rsvp.generator import FaultMix, RsvpGenerator
from tests.conftest import free_port
from tests.integration.streaming.conftest import produce

EVENTS = 3_000
PER_TRIGGER = 1_000
FAULTS = FaultMix(late=0.03, out_of_order=0.05, duplicates=0.03, malformed=0.01)
START_TIMEOUT_S = 120.0
SUBMIT_TIMEOUT_S = 600.0
RUN_FIELDS = ("source_topic", "analyzed_topic", "summaries_topic", "dlq_topic", "metrics_topic",
              "errors_topic", "query_name")
VOLATILE_FIELDS = {b"updated_ms", b"batch_id", b"query"}


@dataclass(frozen=True)
class Standalone:
    """A running standalone master and worker."""

    url: str
    work_dir: Path
    python: Path
    python_calls: Path
    logs: Path


def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    return env | {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "384m"} | extra


def _wait_for(log: Path, text: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if log.is_file() and text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            break
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-3000:] if log.is_file() else ""
    raise AssertionError(f"{log.name}: no {text!r} within {START_TIMEOUT_S}s:\n{tail}")


def _start(args: list[str], log: Path, cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen([str(_spark_class()), *args], stdout=out, stderr=subprocess.STDOUT,
                                cwd=cwd, env=env, start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        if process.poll() is not None:
            return
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            continue


def _python_without_repo(folder: Path, calls: Path) -> Path:
    """An interpreter for the Python workers that cannot see the repository."""
    wrapper = folder / "python-no-repo"
    site = sysconfig.get_paths()["purelib"]
    wrapper.write_text(
        "#!/bin/sh\n"
        f'echo "$$ $*" >> "{calls}"\n'
        f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}" exec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@pytest.fixture()
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    """A master and one worker (2 cores, 1g) on loopback, each in its own process group."""
    home = tmp_path / "standalone"
    work_dir = home / "work"
    work_dir.mkdir(parents=True)
    port = free_port()
    env = _clean_env(SPARK_WORKER_DIR=str(work_dir))
    processes: list[subprocess.Popen] = []
    try:
        master = _start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                         "--port", str(port), "--webui-port", str(free_port())],
                        home / "master.log", home, env)
        processes.append(master)
        _wait_for(home / "master.log", "I have been elected leader", master)
        url = f"spark://127.0.0.1:{port}"
        worker = _start(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                         "--port", str(free_port()), "--webui-port", str(free_port()),
                         "--cores", "2", "--memory", "1g", "--work-dir", str(work_dir), url],
                        home / "worker.log", home, env)
        processes.append(worker)
        _wait_for(home / "worker.log", "Successfully registered with master", worker)
        calls = home / "python-calls.log"
        yield Standalone(url, work_dir, _python_without_repo(home, calls), calls, home)
    finally:
        for process in reversed(processes):
            _stop(process)


def _run_env(cfg: KappaConfig, prefix: str, checkpoints: Path) -> dict[str, str]:
    """KAPPA_* variables that make a subprocess load ``cfg`` with its own prefix and checkpoints."""
    s = cfg.streaming
    env = {f"KAPPA_STREAMING__{field.upper()}": str(getattr(s, field)) for field in RUN_FIELDS}
    return env | {
        "KAPPA_ENV": cfg.env,
        "KAPPA_KAFKA__BOOTSTRAP_SERVERS": cfg.kafka.bootstrap_servers,
        "KAPPA_REDIS__HOST": cfg.redis.host, "KAPPA_REDIS__PORT": str(cfg.redis.port),
        "KAPPA_STREAMING__REDIS_PREFIX": prefix,
        "KAPPA_LAKE__CHECKPOINT_ROOT": str(checkpoints),
        "KAPPA_STACK__DATA_DIR": str(checkpoints.parent / "stack"),
    }


def _summaries(redis_client, prefix: str) -> dict[str, object]:
    """Every summary key under ``prefix`` (metrics excepted), by key without the prefix."""
    state: dict[str, object] = {}
    for key in redis_client.scan_iter(f"{prefix}:*"):
        name = key.decode().removeprefix(f"{prefix}:")
        if name.startswith("metrics:"):
            continue
        kind = redis_client.type(key)
        if kind == b"hash":
            state[name] = {k: v for k, v in redis_client.hgetall(key).items() if k not in VOLATILE_FIELDS}
        elif kind == b"zset":
            state[name] = redis_client.zrange(key, 0, -1, withscores=True)
        elif kind == b"string":  # HyperLogLog
            state[name] = redis_client.pfcount(key)
        else:
            state[name] = (kind, redis_client.dump(key))
    return state


def _last_json(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, f"no JSON report on stdout:\n{stdout[-2000:]}"
    return json.loads(lines[-1])


def _executor_logs(work_dir: Path) -> str:
    return "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-3000:]}"
                     for p in work_dir.glob("app-*/*/stderr"))


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_spark_submit_to_a_standalone_cluster_writes_the_summaries_of_local_mode(
        stream_cfg: KappaConfig, spark, redis_client, standalone: Standalone, tmp_path: Path):
    items = RsvpGenerator(seed=23, faults=FAULTS).generate(EVENTS)
    assert produce(stream_cfg, stream_cfg.streaming.source_topic, (i.line for i in items)) == EVENTS
    name = stream_cfg.streaming.query_name
    prefix = stream_cfg.streaming.redis_prefix
    local_prefix, cluster_prefix = f"{prefix}l", f"{prefix}c"

    local_cfg = stream_cfg.model_copy(update={"streaming": stream_cfg.streaming.model_copy(
        update={"redis_prefix": local_prefix})})
    local = run_stream(local_cfg, RunSpec(mode="replay", query=f"{name}-local", ending="latest",
                                          sinks=frozenset({"redis"}), max_offsets_per_trigger=PER_TRIGGER))
    assert local.records_read == EVENTS

    args = ["--mode", "replay", "--to", "latest", "--sinks", "redis", "--query", f"{name}-cluster",
            "--max-offsets-per-trigger", str(PER_TRIGGER), "--json"]
    command = build_submit(stream_cfg, args, master=standalone.url, python=str(standalone.python),
                           code=package_code(tmp_path / "dist" / "kappa-jobs.zip"),
                           conf={"spark.driver.memory": "512m", "spark.executor.memory": "512m",
                                 "spark.cores.max": "2"})
    # and the other apply mode: local applies in the background, the cluster before each commit
    env = _clean_env(**_run_env(stream_cfg, cluster_prefix, tmp_path / "cluster" / "checkpoints"),
                     KAPPA_STREAMING__APPLY_IN_BACKGROUND="false")
    started = time.monotonic()
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=SUBMIT_TIMEOUT_S, check=False, start_new_session=True)
    elapsed = time.monotonic() - started
    context = (f"spark-submit exit {done.returncode} after {elapsed:.0f}s\nstdout (the driver's Python "
               f"output, stderr included):\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-2000:]}"
               f"\nexecutors:\n{_executor_logs(standalone.work_dir)}")
    assert done.returncode == 0, context
    report = _last_json(done.stdout)
    assert report["records_read"] == EVENTS, context
    assert (report["valid"], report["dead_lettered"], report["late"]) == (local.valid, local.dead_lettered,
                                                                          local.late)

    # the executors ran the shipped zip, through the interpreter that cannot see the repository
    assert list(standalone.work_dir.glob("app-*/*/kappa-jobs.zip")), context
    assert standalone.python_calls.is_file() and standalone.python_calls.read_text().strip(), context

    def phases(prefix: str, query: str) -> set[str]:
        history = redis_client.lrange(f"{prefix}:metrics:{query}:history", 0, -1)
        return {name for text in history for name in json.loads(text)["phases_ms"]}

    assert "wait_apply" in phases(local_prefix, f"{name}-local")  # applied in the background
    assert "wait_apply" not in phases(cluster_prefix, f"{name}-cluster"), context  # before commits

    expected, found = _summaries(redis_client, local_prefix), _summaries(redis_client, cluster_prefix)
    assert {"totals", "topics:all", "fence:summaries"} <= set(expected)
    assert any(k.startswith("cities:") for k in expected) and any(k.startswith("event:") for k in expected)
    totals = {k.decode(): int(v) for k, v in expected["totals"].items()}  # type: ignore[attr-defined]
    assert totals["input"] == EVENTS and totals["dlq"] > 0 and totals["late"] > 0
    assert sorted(found) == sorted(expected)
    for key in sorted(expected):
        assert found[key] == expected[key], key
