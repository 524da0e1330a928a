"""A replay's driver dies (kill -9 of it, its JVM and Python workers) at two exact points: between
Spark's commit of a batch and the Redis apply of its effects, and between two chunks of an apply.
The restart finishes: Redis equals the independent computation, rsvps.analyzed misses nothing
(duplicates only by source position, removable by key), no batch's records are counted twice.
Timed kill -9s of a live driver: test_determinism.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.streaming.state import last_committed
from tests.conftest import KAPPA, REPO
from tests.integration.streaming.conftest import produce
from tests.integration.streaming.expected import compute, metrics_batches
from tests.integration.streaming.test_end_to_end import check_kafka, check_metrics, check_redis, generate

EVENTS = 4_000
PER_BATCH = 1_000


def _env(cfg, kappa_env: dict[str, str]) -> dict[str, str]:
    s = cfg.streaming
    overrides = {f"KAPPA_STREAMING__{name.upper()}": str(getattr(s, name)) for name in (
        "source_topic", "analyzed_topic", "summaries_topic", "dlq_topic", "metrics_topic",
        "errors_topic", "query_name", "redis_prefix")}
    return {**os.environ, **kappa_env, **overrides,
            "KAPPA_LAKE__CHECKPOINT_ROOT": cfg.lake.checkpoint_root, "SPARK_LOCAL_IP": "127.0.0.1"}


def _start(env: dict[str, str], log: Path, kappa: list[str] = KAPPA) -> subprocess.Popen:
    args = [*kappa, "stream", "run", "--mode", "replay", "--to", "latest",
            "--max-offsets-per-trigger", str(PER_BATCH)]
    with log.open("a") as out:
        return subprocess.Popen(args, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


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
@pytest.mark.timeout(900)
def test_a_crash_between_the_commit_and_the_background_apply_loses_nothing(
        stream_cfg, kappa_env, redis_client, kafka_props, tmp_path):
    """Batch 2 is committed by Spark, its effects are in the pending file and not in Redis when
    the job dies (a deterministic fault, not a timed kill); the restart applies them once."""
    crash_batch = 2
    sent = generate(EVENTS, seed=22)
    produce(stream_cfg, stream_cfg.streaming.source_topic, (s.line for s in sent))
    env, log = _env(stream_cfg, kappa_env), tmp_path / "stream.log"
    crashing = [sys.executable, "-m", "tests.integration.streaming.crash_after_commit"]
    proc = _start({**env, "KAPPA_TEST_CRASH_BATCH": str(crash_batch)}, log, kappa=crashing)
    assert proc.wait(timeout=600) == -signal.SIGKILL, log.read_text()[-3000:]
    _kill_group(proc)  # every process of the group is gone

    [checkpoint] = [p for p in Path(stream_cfg.lake.checkpoint_root).iterdir() if p.is_dir()]
    pending = json.loads((checkpoint / "kappa-state" / "pending-apply.json").read_text())
    assert pending["batch_id"] == crash_batch
    assert last_committed(checkpoint) == crash_batch
    # the job's own JVM writes a local checkpoint without Hadoop's checksum files (RawLocalFs)
    assert (checkpoint / "offsets").is_dir() and not list(checkpoint.rglob("*.crc"))
    prefix, s = stream_cfg.streaming.redis_prefix, stream_cfg.streaming
    fence = {k.decode(): int(v) for k, v in redis_client.hgetall(f"{prefix}:fence:summaries").items()
             if k.decode().startswith(s.source_topic) and not k.decode().endswith(":stream_ms")}
    assert fence == {f"{t}:{p}": o for t, p, o in pending["expected"]}  # batch 1's, not batch 2's
    assert fence != {f"{t}:{p}": o for t, p, o in pending["new_fence"]}

    status = subprocess.run([*KAPPA, "stream", "status", "--json"], env=env, cwd=REPO, text=True,
                            capture_output=True, timeout=120, check=True)
    [row] = [r for r in json.loads(status.stdout) if r["query"] == checkpoint.name]
    assert (row["running"], row["pending_apply_batch"]) == (False, crash_batch)

    final = _start(env, log)
    assert final.wait(timeout=600) == 0, log.read_text()[-5000:]
    said = f"pending Redis effects of batch {crash_batch} (left by a stop or crash): applied"
    assert said in log.read_text()
    assert not (checkpoint / "kappa-state" / "pending-apply.json").exists()
    query = checkpoint.name
    batches = metrics_batches(kafka_props, s.metrics_topic, query)
    check_metrics(batches, EVENTS)
    expected = compute(sent)
    check_redis(stream_cfg, redis_client, expected)
    check_kafka(stream_cfg, kafka_props, expected, allow_duplicates=True)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_crash_between_two_chunks_of_an_apply_loses_nothing(
        stream_cfg, kappa_env, redis_client, kafka_props, tmp_path):
    """Batch 1's writes go to Redis in chunks (a small chunk size); the job dies right after
    chunk 1 was made: the fence hash says which chunk is next, the restart makes the rest once."""
    sent = generate(EVENTS, seed=23)
    produce(stream_cfg, stream_cfg.streaming.source_topic, (s.line for s in sent))
    env = {**_env(stream_cfg, kappa_env), "KAPPA_STREAMING__APPLY_CHUNK_ARGS": "400"}
    log = tmp_path / "stream.log"
    crashing = [sys.executable, "-m", "tests.integration.streaming.crash_between_chunks"]
    proc = _start({**env, "KAPPA_TEST_CRASH_BATCH": "1", "KAPPA_TEST_CRASH_CHUNK": "1"}, log, kappa=crashing)
    assert proc.wait(timeout=600) == -signal.SIGKILL, log.read_text()[-3000:]
    _kill_group(proc)
    prefix, s = stream_cfg.streaming.redis_prefix, stream_cfg.streaming
    fence = {k.decode(): v.decode() for k, v in redis_client.hgetall(f"{prefix}:fence:summaries").items()}
    assert fence["apply_chunk"] == "2" and fence["apply_marker"].split("/")[1] == "1", fence

    final = _start(env, log)
    assert final.wait(timeout=600) == 0, log.read_text()[-5000:]
    assert "apply_marker" not in {k.decode() for k in redis_client.hkeys(f"{prefix}:fence:summaries")}
    query = next(iter(redis_client.scan_iter(f"{prefix}:metrics:*:history"))).decode().split(":")[2]
    check_metrics(metrics_batches(kafka_props, s.metrics_topic, query), EVENTS)
    expected = compute(sent)
    check_redis(stream_cfg, redis_client, expected)
    check_kafka(stream_cfg, kafka_props, expected, allow_duplicates=True)
