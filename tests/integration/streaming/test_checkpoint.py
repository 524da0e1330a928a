"""Checkpoints before a query starts: offsets Kafka no longer retains fail closed (or are skipped
when told), a checkpoint built for another query is refused with the recovery options, and a
rebuild from the Redis fence resumes with no gap and no duplicate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from jobs.streaming import checkpoint
from jobs.streaming.job import RunSpec, run_stream
from jobs.streaming.state import CheckpointError
from tests.integration.streaming.conftest import produce
from tests.integration.streaming.test_end_to_end import generate

SINKS = frozenset({"redis"})
pytestmark = pytest.mark.timeout(600)


def _run(cfg, query: str, **kwargs):
    return run_stream(cfg, RunSpec(mode="replay", query=query, ending="latest", sinks=SINKS, **kwargs))


def _totals(redis_client, cfg) -> dict[str, int]:
    raw = redis_client.hgetall(f"{cfg.streaming.redis_prefix}:totals")
    return {k.decode(): int(v) for k, v in raw.items()}


def test_offsets_no_longer_retained_fail_closed_then_skip_when_told(stream_cfg, spark, kafka_props):
    source = stream_cfg.streaming.source_topic
    produce(stream_cfg, source, (s.line for s in generate(300, seed=1)))
    assert _run(stream_cfg, "q-lost").records_read == 300      # checkpoint at 100 per partition
    produce(stream_cfg, source, (s.line for s in generate(300, seed=2)))
    admin = AdminClient(kafka_props)
    for future in admin.delete_records([TopicPartition(source, p, 150) for p in range(3)]).values():
        future.result(timeout=15)
    with pytest.raises(CheckpointError) as failure:
        _run(stream_cfg, "q-lost")
    message = str(failure.value)
    assert f"{source}-0 resumes at offset 100, earliest retained is 150 (50 records lost)" in message
    assert "--skip-lost" in message
    report = _run(stream_cfg, "q-lost", skip_lost=True)
    assert report.records_read == 150                          # offsets 150..199 of 3 partitions


def test_a_checkpoint_of_another_query_is_refused_with_the_recovery_options(stream_cfg, spark):
    produce(stream_cfg, stream_cfg.streaming.source_topic, (s.line for s in generate(60, seed=3)))
    _run(stream_cfg, "q-shape")
    changed = stream_cfg.model_copy(update={"streaming": stream_cfg.streaming.model_copy(
        update={"params": {**stream_cfg.streaming.params, "city_window_s": 300}})})
    with pytest.raises(CheckpointError) as failure:
        _run(changed, "q-shape")
    message = str(failure.value)
    assert "windows_ms changed" in message
    for option in ("revert the config", "checkpoint reset", "checkpoint rebuild", "new streaming.query_name"):
        assert option in message


def test_rebuild_from_the_fence_resumes_without_gap_or_duplicate(stream_cfg, spark, redis_client):
    source = stream_cfg.streaming.source_topic
    produce(stream_cfg, source, (s.line for s in generate(300, seed=4)))
    _run(stream_cfg, "q-rebuild")
    assert _totals(redis_client, stream_cfg)["input"] == 300
    plan = checkpoint.rebuild(stream_cfg, "q-rebuild", execute=False, progress=lambda line: None)
    assert plan["starting_offsets"] == {source: {"0": 100, "1": 100, "2": 100}}
    assert plan["executed"] is False
    checkpoint.rebuild(stream_cfg, "q-rebuild", progress=lambda line: None)
    produce(stream_cfg, source, (s.line for s in generate(150, seed=5)))
    report = _run(stream_cfg, "q-rebuild")
    assert report.records_read == 150                          # only what came after the fence
    assert _totals(redis_client, stream_cfg)["input"] == 450
    seen = checkpoint.inspect(stream_cfg, "q-rebuild")
    assert {p["partition"]: p["sink_fence"] for p in seen["partitions"]} == {0: 150, 1: 150, 2: 150}
    assert seen["verdict"].startswith("resumable")


def test_a_truncated_offset_log_is_called_corrupt_by_inspect_and_run(stream_cfg, spark, run_kappa):
    produce(stream_cfg, stream_cfg.streaming.source_topic, (s.line for s in generate(30, seed=6)))
    report = _run(stream_cfg, "q-torn")
    last = Path(report.checkpoint) / "offsets" / str(report.batches - 1)
    with last.open("r+b") as handle:                     # as `truncate -s 300` does
        handle.truncate(300)
    env = {"KAPPA_STREAMING__SOURCE_TOPIC": stream_cfg.streaming.source_topic,
           "KAPPA_STREAMING__REDIS_PREFIX": stream_cfg.streaming.redis_prefix,
           "KAPPA_LAKE__CHECKPOINT_ROOT": stream_cfg.lake.checkpoint_root}
    seen = run_kappa("stream", "checkpoint", "inspect", "--query", "q-torn", "--json", env=env)
    assert seen.returncode == 0, seen.stderr
    verdict = json.loads(seen.stdout)["verdict"]
    assert verdict.startswith(f"corrupt: {last} is unreadable (") and "resumable" not in verdict
    assert "`kappa stream checkpoint rebuild --query q-torn --execute`" in verdict

    again = run_kappa("stream", "run", "--mode", "replay", "--query", "q-torn", "--sinks", "redis", env=env)
    lines = [line for line in again.stderr.splitlines() if line.strip()]
    assert again.returncode == 1 and len(lines) == 1, again.stderr       # before Spark starts
    assert lines[0].startswith(f"error: query q-torn: its checkpoint is corrupt: {last} is unreadable")
    assert "kappa stream checkpoint rebuild --query q-torn --execute" in lines[0]
    assert "retried at the next start" not in lines[0]
