"""Kafka stops under a live job: `kappa stream status` says the job waits for Kafka and since when,
the job says so once, and librdkafka's connection errors come rate-limited, not many a second.

Uses a private embedded broker (its own port and data folder), so the session's broker never stops.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from jobs.common.config import load_config
from tests.conftest import KAPPA, REPO, free_port, start_stack
from tests.integration.streaming.conftest import produce
from tests.integration.streaming.test_end_to_end import generate

NAMES = ("source_topic", "analyzed_topic", "summaries_topic", "dlq_topic", "metrics_topic", "errors_topic")
OUTAGE_S = 20


@pytest.fixture()
def private_kafka(tmp_path):
    """A broker of this test alone; stopped (by its pidfile) at the end."""
    stack, cfg = start_stack(lambda attempt: load_config("test", environ={}, overrides={
        "kafka.bootstrap_servers": f"127.0.0.1:{free_port()}",
        "stack.data_dir": str(tmp_path / f"stack-{attempt}"),
        "redis.embedded": False, "redis.port": free_port()}))
    try:
        yield cfg, stack
    finally:
        stack.down(progress=lambda message: None)


def _status(env: dict[str, str]) -> dict:
    result = subprocess.run([*KAPPA, "stream", "status", "--json"], env=env, cwd=REPO, text=True,
                            capture_output=True, timeout=120, check=True)
    [row] = json.loads(result.stdout)
    return row


def _wait(condition, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_status_says_the_job_waits_for_kafka_and_the_log_is_not_flooded(
        private_kafka, stack, kappa_env, tmp_path):
    cfg, broker = private_kafka
    name = uuid.uuid4().hex[:8]
    topics = {field: f"{field.split('_')[0]}.{name}" for field in NAMES}
    admin = AdminClient({**cfg.kafka.client_config(), "log_level": "0"})
    for future in admin.create_topics([NewTopic(t, 3 if f == "source_topic" else 1, 1)
                                       for f, t in topics.items()]).values():
        future.result(timeout=15)
    produce(cfg, topics["source_topic"], (s.line for s in generate(30, seed=81)))
    env = {**os.environ, **kappa_env, "SPARK_LOCAL_IP": "127.0.0.1",
           "KAPPA_KAFKA__BOOTSTRAP_SERVERS": cfg.kafka.bootstrap_servers,
           "KAPPA_STREAMING__QUERY_NAME": f"q-{name}", "KAPPA_STREAMING__REDIS_PREFIX": f"t{name}",
           "KAPPA_STREAMING__TRIGGER_S": "0.5", "KAPPA_LAKE__CHECKPOINT_ROOT": str(tmp_path / "ck"),
           **{f"KAPPA_STREAMING__{field.upper()}": topic for field, topic in topics.items()}}
    log = tmp_path / "job.log"
    with log.open("ab") as out:
        job = subprocess.Popen([*KAPPA, "stream", "run", "--sinks", "redis"], env=env, cwd=REPO,
                               stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait(lambda: "batch 0: 30 records" in log.read_text(), "batch 0", 300)
        assert _status(env)["state"] == "running"
        before = len(log.read_text().splitlines())
        down_at = time.time() * 1000
        broker.down(progress=lambda message: None)
        _wait(lambda: _status(env)["state"] == "waiting", "the waiting state", 60)
        row = _status(env)
        assert row["running"] and row["pid"] == job.pid
        assert row["state_detail"].startswith(f"Kafka at {cfg.kafka.bootstrap_servers} (")
        assert down_at - 8_000 <= row["state_since_ms"] <= down_at + 10_000     # its last sign of life
        time.sleep(OUTAGE_S)
        during = log.read_text().splitlines()[before:]
        assert job.poll() is None, "\n".join(during)
        said = [line for line in during if "waiting for Kafka since" in line]
        assert len(said) == 1, "\n".join(during)
        failures = [line for line in during if "Connect to" in line or "failed" in line.lower()]
        assert len(failures) <= 10, f"{len(failures)} lines in {OUTAGE_S} s:\n" + "\n".join(failures[:40])
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=60)
