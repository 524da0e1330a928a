"""What a run says about itself: a progress line per batch with its Kafka records (also after idle
triggers), a report under the configured topic names and only for its sinks, and `kappa stream
status` telling a running, a stopped and a finished query apart."""

from __future__ import annotations

import json
import threading
import time

import pytest

from jobs.streaming.job import RunSpec, run_stream
from pipelines.rsvp.generator import RsvpGenerator
from tests.integration.streaming.conftest import produce
from tests.integration.streaming.expected import read_topic

pytestmark = pytest.mark.timeout(600)


def _lines(count: int, seed: int) -> list[bytes]:
    return [item.line for item in RsvpGenerator(seed=seed).generate(count)]


def _wait(condition, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _status(run_kappa, cfg) -> dict:
    env = {"KAPPA_STREAMING__REDIS_PREFIX": cfg.streaming.redis_prefix,
           "KAPPA_LAKE__CHECKPOINT_ROOT": cfg.lake.checkpoint_root}
    result = run_kappa("stream", "status", "--json", env=env)
    assert result.returncode == 0, result.stderr
    return {row["query"]: row for row in json.loads(result.stdout)}


@pytest.mark.slow
def test_live_batches_after_idle_triggers_reports_and_status(stream_cfg, spark, kafka_props, run_kappa):
    s = stream_cfg.streaming
    produce(stream_cfg, s.source_topic, _lines(300, seed=71))
    said: list[str] = []
    stop = threading.Event()
    outcome: dict = {}
    # Spark reports a trigger that found no data every second: each one used to become a line
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "1000")

    def live() -> None:
        try:
            outcome["report"] = run_stream(stream_cfg, RunSpec(mode="live"), progress=said.append, stop=stop)
        except Exception as exc:  # handed to the test's thread
            outcome["error"] = exc

    runner = threading.Thread(target=live)
    runner.start()
    try:
        _wait(lambda: any(line.startswith("batch 0:") for line in said) or "error" in outcome, "batch 0")
        running = _status(run_kappa, stream_cfg)[s.query_name]
        assert (running["state"], running["running"], running["mode"]) == ("running", True, "live")
        time.sleep(3)                                              # idle triggers
        produce(stream_cfg, s.source_topic, _lines(300, seed=72))
        _wait(lambda: sum(line.startswith("batch ") for line in said) >= 2 or "error" in outcome,
              "a second batch line")
    finally:
        stop.set()
        runner.join(timeout=300)
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
    assert "error" not in outcome, outcome.get("error")
    batches = [line for line in said if line.startswith("batch ")]
    assert batches[0].startswith("batch 0: 300 records, "), said
    assert batches[1].startswith("batch 1: 300 records, "), said
    assert not any(" rows" in line for line in batches), said
    report = outcome["report"]
    assert report.written == {s.analyzed_topic: 600, s.dlq_topic: 0, "redis_rows": 600,
                              s.summaries_topic: report.written[s.summaries_topic]}
    assert report.written[s.summaries_topic] > 0
    stopped = _status(run_kappa, stream_cfg)[s.query_name]
    assert (stopped["state"], stopped["running"]) == ("stopped", False)

    summaries_before = len(read_topic(kafka_props, s.summaries_topic, 3))
    replay = run_stream(stream_cfg, RunSpec(mode="replay", query="q-redis-only", ending="latest",
                                            sinks=frozenset({"redis"})))
    assert replay.records_read == 600 and replay.written == {"redis_rows": 0}   # fenced: applied live
    assert len(read_topic(kafka_props, s.summaries_topic, 3)) == summaries_before
    finished = _status(run_kappa, stream_cfg)["q-redis-only"]
    assert (finished["state"], finished["mode"]) == ("finished", "replay")
    assert finished["state_detail"] == f"{replay.batches} batches, 600 records read"
