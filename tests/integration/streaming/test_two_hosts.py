"""A live driver moved to another host resumes exactly; a second driver is refused naming the holder.

"host A" and "host B" are two working folders, each with its own ``var/`` (stack data and logs),
lake folder and temp folders (``TMPDIR``, ``SPARK_LOCAL_DIRS``) and its own ``KAPPA_HOSTNAME``;
they share only the checkpoint location (``lake.checkpoint_root``) and the stack (Kafka, Redis).
A runs live and is killed (-9, with its JVM and Python workers) mid-run; B started while A ran was
refused; B started once A's lease expired continues the query. The views equal an uninterrupted
replay's key by key, and the outputs the independent computation.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis

from jobs.streaming.lease import lease_key
from tests.conftest import KAPPA, REPO
from tests.integration.streaming.conftest import produce
from tests.integration.streaming.expected import compute
from tests.integration.streaming.test_determinism import _assert_same_view, _late_flags, _snapshot
from tests.integration.streaming.test_end_to_end import check_kafka, check_redis, generate
from tests.integration.streaming.test_kill_restart import _env, _kill_group

EVENTS = 10_000
FIRST = 4_998   # produced before host A starts; a multiple of the 3 partitions (round-robin positions)
PER_BATCH = 500
LEASE_TTL_S = 6


def _host_env(base: dict[str, str], name: str, folder: Path) -> dict[str, str]:
    """A host's environment: its own name, var/, lake, logs and temp folders; the shared rest."""
    for sub in ("var/stack", "var/lake", "var/collector", "tmp/spark"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return {**base, "KAPPA_HOSTNAME": name, "KAPPA_STACK__DATA_DIR": str(folder / "var" / "stack"),
            "KAPPA_LAKE__ROOT": str(folder / "var" / "lake"),
            "KAPPA_COLLECTOR__LOG_PATH": str(folder / "var" / "collector" / "log.sqlite"),
            "TMPDIR": str(folder / "tmp"), "SPARK_LOCAL_DIRS": str(folder / "tmp" / "spark"),
            "KAPPA_STREAMING__LEASE_TTL_S": str(LEASE_TTL_S), "KAPPA_STREAMING__LEASE_RENEW_S": "1",
            "PYTHONPATH": str(REPO)}   # the code as installed on each host (not the venv's editable hook)


def _live(env: dict[str, str], folder: Path) -> subprocess.Popen:
    args = [*KAPPA, "stream", "run", "--mode", "live", "--max-offsets-per-trigger", str(PER_BATCH)]
    with (folder / "stream.log").open("a") as out:
        return subprocess.Popen(args, env=env, cwd=folder, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _input(client: redis.Redis, prefix: str) -> int:
    return int(client.hget(f"{prefix}:totals", "input") or 0)


def _wait(condition, proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_driver_moved_to_another_host_resumes_exactly(stream_cfg, kappa_env, kafka_props, topic_factory,
                                                        tmp_path) -> None:
    sent = generate(EVENTS, seed=41)
    produce(stream_cfg, stream_cfg.streaming.source_topic, (s.line for s in sent[:FIRST]))
    s, shared = stream_cfg.streaming, _env(stream_cfg, kappa_env)
    client = redis.Redis(host=stream_cfg.redis.host, port=stream_cfg.redis.port)
    host_a, host_b = tmp_path / "host-a", tmp_path / "host-b"
    env_a, env_b = _host_env(shared, "host-a", host_a), _host_env(shared, "host-b", host_b)

    a = _live(env_a, host_a)
    _wait(lambda: _input(client, s.redis_prefix) > 0, a, host_a / "stream.log", 400)
    second = subprocess.run([*KAPPA, "stream", "run", "--mode", "live"], env=env_b, cwd=host_b,
                            capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 3, second.stdout + second.stderr
    said = second.stdout + second.stderr
    assert f"already runs (host host-a, pid {a.pid}, since " in said, said
    assert "Traceback" not in said and "kappa stream stop" in said, said
    assert a.poll() is None, "the refused driver stopped the running one"

    produce(stream_cfg, s.source_topic, (item.line for item in sent[FIRST:]))
    _wait(lambda: _input(client, s.redis_prefix) > FIRST, a, host_a / "stream.log", 400)
    _kill_group(a)   # mid-run: the second half is being read
    assert _input(client, s.redis_prefix) < EVENTS, "host A finished before it was killed: lower PER_BATCH"
    key = lease_key(Path(stream_cfg.lake.checkpoint_root) / s.query_name, s.query_name)
    assert b"host-a" in (client.get(key) or b""), "host A's lease should outlive it until it expires"
    deadline = time.monotonic() + LEASE_TTL_S + 10
    while client.exists(key):   # nobody renews it: it expires within the TTL
        assert time.monotonic() < deadline, "host A's lease did not expire"
        time.sleep(0.2)
    b = _live(env_b, host_b)
    _wait(lambda: _input(client, s.redis_prefix) >= EVENTS, b, host_b / "stream.log", 600)
    b.send_signal(signal.SIGTERM)
    assert b.wait(timeout=120) == 0, (host_b / "stream.log").read_text()[-3000:]
    assert not list(host_b.glob("**/checkpoints")), "host B wrote a checkpoint of its own"

    uninterrupted = {**shared, "KAPPA_STREAMING__REDIS_PREFIX": f"{s.redis_prefix}u",
                     "KAPPA_STREAMING__ANALYZED_TOPIC": topic_factory(3, "analyzed-u"),
                     "KAPPA_STREAMING__QUERY_NAME": f"{s.query_name}-u"}
    replay = subprocess.run([*KAPPA, "stream", "run", "--mode", "replay", "--to", "latest", "--fresh"],
                            env=uninterrupted, cwd=REPO, capture_output=True, text=True, timeout=600,
                            check=False)
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-3000:]

    _assert_same_view(client, _snapshot(client, s.redis_prefix), _snapshot(client, f"{s.redis_prefix}u"),
                      "moved vs uninterrupted")
    expected = compute(sent)
    check_redis(stream_cfg, client, expected)
    check_kafka(stream_cfg, kafka_props, expected, allow_duplicates=True)
    moved = _late_flags(kafka_props, s.analyzed_topic)
    assert moved == _late_flags(kafka_props, uninterrupted["KAPPA_STREAMING__ANALYZED_TOPIC"])
    assert set(moved) == expected.valid_positions
