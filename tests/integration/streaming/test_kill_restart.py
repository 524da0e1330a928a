"""kill -9 of the streaming job's driver (and its JVM and Python workers) at three points,
restarting each time: Redis still equals the independent computation, rsvps.analyzed misses
nothing (duplicates only by source position, removable by key)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import KAPPA, REPO
from tests.integration.streaming.conftest import produce
from tests.integration.streaming.expected import compute, metrics_batches
from tests.integration.streaming.test_end_to_end import check_kafka, check_metrics, check_redis, generate

EVENTS = 10_000
PER_BATCH = 1_000
KILL_AFTER_S = (0.2, 1.5, 4.0)  # after a new batch reported: early, middle, late in the next one


def _env(cfg, kappa_env: dict[str, str]) -> dict[str, str]:
    s = cfg.streaming
    overrides = {f"KAPPA_STREAMING__{name.upper()}": str(getattr(s, name)) for name in (
        "source_topic", "analyzed_topic", "summaries_topic", "dlq_topic", "metrics_topic",
        "errors_topic", "query_name", "redis_prefix")}
    return {**os.environ, **kappa_env, **overrides,
            "KAPPA_LAKE__CHECKPOINT_ROOT": cfg.lake.checkpoint_root, "SPARK_LOCAL_IP": "127.0.0.1"}


def _start(env: dict[str, str], log: Path) -> subprocess.Popen:
    args = [*KAPPA, "stream", "run", "--mode", "replay", "--to", "latest",
            "--max-offsets-per-trigger", str(PER_BATCH)]
    with log.open("a") as out:
        return subprocess.Popen(args, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _reported(redis_client, prefix: str) -> int:
    return sum(redis_client.llen(key) for key in redis_client.scan_iter(f"{prefix}:metrics:*:history"))


def _kill_group(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    raise AssertionError("processes of the killed job are still alive")


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_kill_9_three_times_loses_nothing_and_counts_nothing_twice(
        stream_cfg, kappa_env, redis_client, kafka_props, tmp_path):
    sent = generate(EVENTS, seed=21)
    produce(stream_cfg, stream_cfg.streaming.source_topic, (s.line for s in sent))
    env, log = _env(stream_cfg, kappa_env), tmp_path / "stream.log"
    prefix = stream_cfg.streaming.redis_prefix
    kills = 0
    for delay in KILL_AFTER_S:
        proc = _start(env, log)
        seen = _reported(redis_client, prefix)
        deadline = time.monotonic() + 400
        while _reported(redis_client, prefix) == seen and proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        time.sleep(delay)
        if proc.poll() is None:
            _kill_group(proc)
            kills += 1
    assert kills >= 2, "the job finished before it could be killed: lower PER_BATCH"
    final = _start(env, log)
    assert final.wait(timeout=600) == 0, log.read_text()[-5000:]

    s = stream_cfg.streaming
    query = next(iter(redis_client.scan_iter(f"{prefix}:metrics:*:history"))).decode().split(":")[2]
    batches = metrics_batches(kafka_props, s.metrics_topic, query)
    check_metrics(batches, EVENTS)
    expected = compute(sent, batches, s.source_topic)
    check_redis(stream_cfg, redis_client, expected)
    check_kafka(stream_cfg, kafka_props, expected, allow_duplicates=True)
