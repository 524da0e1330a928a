"""Redis loses its data (``FLUSHALL``) under a running live job: the job stops at its next batch
with an error that names the loss, ``kappa reprocess start`` and the runbook (never "another
query"), writes no summary into the emptied Redis, leaves its Kafka outputs complete up to its
last committed batch, and a restart refuses the same way (docs/runbooks/redis-lost.md)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from jobs.streaming.job import RunSpec, run_stream
from jobs.streaming.state import checkpoint_path, last_committed
from tests.conftest import KAPPA, REPO
from tests.integration.streaming.conftest import produce
from tests.integration.streaming.expected import Sent, compute, read_topic
from tests.integration.streaming.test_end_to_end import generate
from tests.integration.streaming.test_kill_restart import _env

BEFORE, AFTER = 300, 300   # records applied before the loss, records that arrive after it
LOST = "Redis lost the view's data"


class LiveJob:
    """The live job in a thread of the test's process (the session's SparkSession)."""

    def __init__(self, cfg) -> None:
        self.stop, self.error = threading.Event(), None
        self.thread = threading.Thread(target=self._run, args=(cfg,), daemon=True)
        self.thread.start()

    def _run(self, cfg) -> None:
        try:
            run_stream(cfg, RunSpec(mode="live"), stop=self.stop)
        except BaseException as exc:  # the test reads it
            self.error = exc

    def end(self, timeout_s: float) -> BaseException | None:
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            self.stop.set()
            self.thread.join(120)
            raise AssertionError(f"the live job still ran {timeout_s:.0f} s after Redis lost its data")
        return self.error


def _wait(condition, what: str, job: LiveJob, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert job.thread.is_alive(), f"the job ended while waiting for {what}: {job.error!r}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _reported(redis_client, history: str) -> int:
    """The records of the batches whose metrics the job wrote (after their Redis apply)."""
    return sum(json.loads(item)["input_rows"] for item in redis_client.lrange(history, 0, -1))


def _committed_ends(checkpoint: Path, topic: str) -> dict[int, int]:
    """Each partition's next offset after the last batch Spark committed (its offset log)."""
    batch = last_committed(checkpoint)
    assert batch is not None
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    ends = next(json.loads(line) for line in lines[2:] if line.startswith("{"))[topic]
    return {int(partition): int(offset) for partition, offset in ends.items()}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("in_background", [True, False], ids=["background_apply", "apply_in_the_batch"])
def test_flushall_under_a_live_job_stops_it_naming_the_loss_and_writes_no_partial_view(
        stream_cfg, kappa_env, redis_client, kafka_props, spark, in_background: bool) -> None:
    s = stream_cfg.streaming.model_copy(update={"apply_in_background": in_background})
    stream_cfg = stream_cfg.model_copy(update={"streaming": s})
    prefix, query = s.redis_prefix, s.query_name
    before = generate(BEFORE, seed=81)
    after = [Sent(x.partition, x.offset + BEFORE // 3, x.line, x.kind) for x in generate(AFTER, seed=82)]
    produce(stream_cfg, s.source_topic, (x.line for x in before))
    job = LiveJob(stream_cfg)
    try:
        _wait(lambda: _reported(redis_client, f"{prefix}:metrics:{query}:history") == BEFORE,
              "the first records applied and their metrics written", job)
        redis_client.flushall()   # Redis lost its data: a restart without persistence, a failover
        lost_at = time.monotonic()
        produce(stream_cfg, s.source_topic, (x.line for x in after))
        error = job.end(timeout_s=120)
        stopped_after_s = time.monotonic() - lost_at
    finally:
        job.stop.set()
        job.thread.join(120)

    assert error is not None, "the live job kept running after Redis lost its data"
    text = str(error)
    assert LOST in text and "kappa reprocess start" in text and "docs/runbooks/redis-lost.md" in text, text
    assert "another query" not in text, text
    assert stopped_after_s < 60, stopped_after_s

    # nothing a reader would take as the current view: no fence, no summary; only the job's state
    keys = {key.decode() for key in redis_client.scan_iter(f"{prefix}:*")}
    assert keys == {f"{prefix}:metrics:{query}:status"}, sorted(keys)
    status = redis_client.hgetall(f"{prefix}:metrics:{query}:status")
    state = {k.decode(): v.decode() for k, v in status.items()}
    assert state["state"] == "failed" and LOST in state["detail"], state

    # rsvps.analyzed holds every valid record below the offsets Spark committed, each once
    checkpoint = checkpoint_path(stream_cfg.lake.checkpoint_root, query)
    ends = _committed_ends(checkpoint, s.source_topic)
    assert sum(ends.values()) >= BEFORE
    valid = {pos for pos in compute(before + after).valid_positions if pos[1] < ends[pos[0]]}
    analyzed = [json.loads(m.value()) for m in read_topic(kafka_props, s.analyzed_topic, 3)]
    positions = [(r["source_partition"], r["source_offset"]) for r in analyzed]
    assert set(positions) == valid and len(positions) == len(valid)

    # a restart refuses the same way, with one error line, before Spark starts; it writes nothing
    env = {**_env(stream_cfg, kappa_env), "KAPPA_STREAMING__APPLY_IN_BACKGROUND": str(in_background)}
    again = subprocess.run([*KAPPA, "stream", "run", "--mode", "live"], env=env, cwd=REPO, text=True,
                           capture_output=True, timeout=120, check=False)
    errors = [line for line in again.stderr.splitlines() if line.startswith("error: ")]
    assert again.returncode == 1 and len(errors) == 1, again.stderr
    assert errors[0].startswith(f"error: {LOST}: the fence {prefix}:fence:summaries is gone"), errors
    assert "Traceback" not in again.stderr
    assert {key.decode() for key in redis_client.scan_iter(f"{prefix}:*")} == keys
