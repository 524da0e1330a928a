"""The Spark service (`kappa spark up`): a replay attached to it gives what a cold replay gives,
a load and a batch job attached to it write every row once, the CLI falls back to a cold Spark
when it is down, and a cold CLI run leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from jobs.host.processes import session_alive
from tests.conftest import KAPPA, REPO
from tests.integration.streaming.conftest import produce
from tests.integration.streaming.expected import compute, metrics_batches
from tests.integration.streaming.test_end_to_end import check_redis, generate

EVENTS = 3_000
STREAM_VARS = ("source_topic", "analyzed_topic", "summaries_topic", "dlq_topic", "metrics_topic",
               "errors_topic")
VOLATILE = (":metrics:", ":status", ":lag", ":heartbeat")
"""Keys whose values are timings or wall-clock times of a run, not its results."""


def _env(cfg, kappa_env: dict[str, str], data_dir: Path, prefix: str) -> dict[str, str]:
    s = cfg.streaming
    overrides = {f"KAPPA_STREAMING__{name.upper()}": str(getattr(s, name)) for name in STREAM_VARS}
    return {**os.environ, **kappa_env, **overrides, "KAPPA_STREAMING__REDIS_PREFIX": prefix,
            "KAPPA_LAKE__CHECKPOINT_ROOT": cfg.lake.checkpoint_root,
            "KAPPA_STACK__DATA_DIR": str(data_dir), "SPARK_LOCAL_IP": "127.0.0.1", "COLUMNS": "200"}


def _kappa(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KAPPA, *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _replay(env: dict[str, str], query: str, logs: Path, nice: int = 0) -> tuple[dict, str, float]:
    """A replay CLI run (at niceness ``nice``) in a process group of its own; the report, stderr,
    and how long any process of its group outlived it (s). Its output goes to files: a process that
    inherited a pipe would hold it open, and waiting for the pipe's end would wait for that process too."""
    args = [*(["nice", "-n", str(nice)] if nice else []), *KAPPA, "stream", "run", "--mode", "replay",
            "--from", "earliest", "--to", "latest", "--fresh", "--sinks", "redis", "--query", query, "--json"]
    out, err = logs / f"{query}.out", logs / f"{query}.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        proc = subprocess.Popen(args, env=env, cwd=REPO, stdout=stdout, stderr=stderr,
                                start_new_session=True)
        code = proc.wait(timeout=600)
    exited = time.monotonic()
    while session_alive(proc.pid) and time.monotonic() - exited < 30:
        time.sleep(0.05)
    outlived = time.monotonic() - exited
    assert code == 0, err.read_text()[-4000:]
    return json.loads(out.read_text().strip().splitlines()[-1]), err.read_text(), outlived



def _redis_view(redis_client, prefix: str) -> dict[str, object]:
    """Every key of a run's prefix (prefix removed) with its value, timings left out."""
    view: dict[str, object] = {}
    for raw in redis_client.scan_iter(f"{prefix}:*"):
        key = raw.decode()
        if any(part in key for part in VOLATILE):
            continue
        value = _value(redis_client, raw)
        if key.startswith(f"{prefix}:fence") and isinstance(value, dict):
            # its offsets; its other fields name the query and the time it applied
            value = {field: offset for field, offset in value.items() if b":" in field}
        view[key.removeprefix(prefix)] = value
    return view


def _value(redis_client, key: bytes) -> object:
    kind = redis_client.type(key).decode()
    if kind == "hash":
        return redis_client.hgetall(key)
    if kind == "zset":
        return redis_client.zrange(key, 0, -1, withscores=True)
    if kind == "list":
        return redis_client.lrange(key, 0, -1)
    if kind == "set":
        return sorted(redis_client.smembers(key))
    return redis_client.get(key)


def _check_load(env: dict[str, str], topic: str, root: Path, pid: int) -> None:
    """`kappa load` of the source topic into bronze, attached: every record lands once."""
    from deltalake import DeltaTable

    tables = json.dumps({"bronze.rsvps_raw": {"topic": topic, "quality_policy": "quarantine"}})
    result = _kappa({**env, "KAPPA_LAKE__ROOT": str(root), "KAPPA_LOADER__TABLES": tables},
                    "load", "--json")
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"attached to the Spark service pid {pid}" in result.stderr
    [report] = json.loads(result.stdout)
    assert report["outcome"] == "committed" and report["rows"] + report["quarantined"] == EVENTS
    assert DeltaTable(str(root / "bronze" / "rsvps_raw")).to_pyarrow_table().num_rows == report["rows"]


def _start_service(env: dict[str, str]) -> int:
    result = _kappa(env, "spark", "up")
    assert result.returncode == 0, result.stderr[-4000:]
    status = _kappa(env, "spark", "status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    return int(json.loads(status.stdout)["service"]["pid"])


def _nices_while(pid: int) -> tuple[set[int], threading.Event]:
    """The niceness values the service's JVM takes until the event is set (sampled every 20 ms)."""
    seen: set[int] = set()
    done = threading.Event()

    def sample() -> None:
        [jvm] = [p for p in psutil.Process(pid).children() if "java" in p.name()]
        while not done.wait(0.02):
            for tid in os.listdir(f"/proc/{jvm.pid}/task"):
                try:
                    seen.add(os.getpriority(os.PRIO_PROCESS, int(tid)))
                except OSError:
                    pass  # a thread that ended

    threading.Thread(target=sample, daemon=True).start()
    return seen, done


def _stop(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.slow
@pytest.mark.timeout(1200)
def _check_batch(env: dict[str, str], root: Path, pid: int) -> None:
    """`kappa batch run city_daily`, attached: one gold row per date, city and country of silver,
    counting every silver row once (computed here from the rows written)."""
    from datetime import date, timedelta

    from deltalake import DeltaTable, write_deltalake

    from bench.batch import START, generate
    from jobs.lake.delta import table_uri

    silver = generate(300, 2)["silver.rsvps"]
    write_deltalake(table_uri(str(root), "silver.rsvps"), silver, partition_by=["event_date"])
    groups = set(zip(*(silver[column].to_pylist() for column in ("event_date", "city", "country")),
                     strict=True))
    end: date = START + timedelta(days=2)
    result = _kappa({**env, "KAPPA_LAKE__ROOT": str(root)}, "batch", "run", "city_daily",
                    "--from", START.isoformat(), "--to", end.isoformat(), "--json")
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"attached to the Spark service pid {pid}" in result.stderr
    [report] = json.loads(result.stdout)
    assert (report["rows_read"], report["rows_written"]) == (silver.num_rows, len(groups)), report
    gold = DeltaTable(table_uri(str(root), "gold.city_daily")).to_pyarrow_table()
    assert sum(gold["rsvps"].to_pylist()) == silver.num_rows


def test_a_replay_attached_to_the_service_equals_a_cold_one_which_leaves_no_process(
        stream_cfg, kappa_env, redis_client, kafka_props, tmp_path):
    sent = generate(EVENTS, seed=37)
    produce(stream_cfg, stream_cfg.streaming.source_topic, (s.line for s in sent))
    data_dir, tag = tmp_path / "stack", tmp_path.name[-8:]
    warm_prefix, cold_prefix = f"w{tag}", f"c{tag}"
    warm_env = {**_env(stream_cfg, kappa_env, data_dir, warm_prefix), "KAPPA_SPARK__SERVICE_NICE": "3"}
    cold_env = _env(stream_cfg, kappa_env, data_dir, cold_prefix)
    cold, cold_err, outlived = _replay(cold_env, "cold", tmp_path)  # no service is up yet
    assert "spark service" not in cold_err.lower()  # the default, cold path says nothing of it
    assert outlived < 1.0, f"the cold run's JVM or Python daemons outlived it by {outlived:.1f} s"

    pid = _start_service(warm_env)
    try:
        other = _kappa({**warm_env, "KAPPA_SPARK__MASTER": "local[1]"}, "spark", "status")
        assert other.returncode == 1 and "refuses" in other.stdout and "spark.master" in other.stdout
        seen, done = _nices_while(pid)
        warm, warm_err, _ = _replay(warm_env, "warm", tmp_path, nice=1)  # the service serves at 1
        done.set()
        assert 1 in seen, f"the JVM's threads took niceness {seen} during a request from niceness 1"
        assert f"attached to the Spark service pid {pid}" in warm_err
        _check_load(warm_env, stream_cfg.streaming.source_topic, tmp_path / "lake", pid)
        _check_batch(warm_env, tmp_path / "batch-lake", pid)
        service = psutil.Process(pid)
        processes = [service, *service.children(recursive=True)]  # the JVM, the Python daemons
        assert len(processes) >= 4, processes
        assert {p.nice() for p in processes} == {3}  # spark.service_nice again once the requests end
        down = _kappa(warm_env, "spark", "down")
        assert down.returncode == 0, down.stderr
        _, left = psutil.wait_procs(processes, timeout=5)
        assert not [p for p in left if p.status() != psutil.STATUS_ZOMBIE], (
            f"{left} outlived `kappa spark down`")
    finally:
        _stop(pid)
    status = _kappa(warm_env, "spark", "status")
    assert status.returncode == 1 and "no Spark service is up" in status.stdout

    assert (warm["records_read"], warm["valid"], warm["dead_lettered"], warm["late"]) == (
        cold["records_read"], cold["valid"], cold["dead_lettered"], cold["late"])
    assert warm["written"]["redis_rows"] == cold["written"]["redis_rows"] > 0
    assert _redis_view(redis_client, warm_prefix) == _redis_view(redis_client, cold_prefix)
    s = stream_cfg.streaming
    assert metrics_batches(kafka_props, s.metrics_topic, "warm")  # the attached run reported its batches
    expected = compute(sent)
    warm_cfg = stream_cfg.model_copy(update={"streaming": s.model_copy(update={"redis_prefix": warm_prefix})})
    check_redis(warm_cfg, redis_client, expected)
