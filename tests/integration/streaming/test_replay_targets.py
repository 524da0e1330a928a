"""A replay's checkpoint is bound to its targets: another Redis prefix is another run, and a
finished replay whose Redis data is gone refuses to resume (naming ``--fresh``) instead of
reading nothing and exiting 0."""

from __future__ import annotations

import subprocess

import pytest

from jobs.streaming.job import RunSpec, run_stream
from jobs.streaming.state import CheckpointError
from tests.conftest import KAPPA, REPO
from tests.integration.streaming.conftest import produce
from tests.integration.streaming.test_end_to_end import generate
from tests.integration.streaming.test_kill_restart import _env

EVENTS = 300
REDIS_ONLY = frozenset({"redis"})


def _totals(redis_client, prefix: str) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in redis_client.hgetall(f"{prefix}:totals").items()}


def _drop(redis_client, prefix: str) -> None:
    keys = list(redis_client.scan_iter(f"{prefix}:*"))
    if keys:
        redis_client.delete(*keys)


def test_the_same_range_into_another_prefix_or_a_lost_redis_is_not_a_silent_no_op(
        stream_cfg, redis_client, spark) -> None:
    s = stream_cfg.streaming
    produce(stream_cfg, s.source_topic, (item.line for item in generate(EVENTS, seed=73)))
    spec = RunSpec(mode="replay", ending="latest", sinks=REDIS_ONLY)
    moved = s.model_copy(update={"redis_prefix": f"{s.redis_prefix}b"})
    other = stream_cfg.model_copy(update={"streaming": moved})
    try:
        run_stream(stream_cfg, spec)
        assert _totals(redis_client, s.redis_prefix)["input"] == EVENTS

        report = run_stream(other, spec)   # the same range, another target
        assert report.records_read == EVENTS
        assert _totals(redis_client, f"{s.redis_prefix}b")["input"] == EVENTS

        _drop(redis_client, s.redis_prefix)   # Redis lost the first target's data
        with pytest.raises(CheckpointError) as refused:
            run_stream(stream_cfg, spec)
        assert "--fresh" in str(refused.value) and "fence" in str(refused.value)
        assert not redis_client.exists(f"{s.redis_prefix}:totals")

        run_stream(stream_cfg, RunSpec(mode="replay", ending="latest", sinks=REDIS_ONLY, fresh=True))
        assert _totals(redis_client, s.redis_prefix)["input"] == EVENTS
    finally:
        _drop(redis_client, s.redis_prefix)
        _drop(redis_client, f"{s.redis_prefix}b")


def test_summaries_name_a_lost_view_instead_of_asking_whether_the_job_runs(
        stream_cfg, kappa_env, redis_client, spark) -> None:
    s = stream_cfg.streaming
    env = _env(stream_cfg, kappa_env)
    empty = subprocess.run([*KAPPA, "summaries", "top-topics"], env=env, cwd=REPO, text=True,
                           capture_output=True, timeout=120, check=False)
    assert "is the streaming job running?" in empty.stdout, empty.stdout + empty.stderr

    produce(stream_cfg, s.source_topic, (item.line for item in generate(EVENTS, seed=74)))
    try:   # the live query's checkpoint gets batches, then Redis loses the view
        run_stream(stream_cfg, RunSpec(mode="replay", query=s.query_name, ending="latest", sinks=REDIS_ONLY))
        _drop(redis_client, s.redis_prefix)
        for args in (["top-topics"], ["cities", "--json"]):
            lost = subprocess.run([*KAPPA, "summaries", *args], env=env, cwd=REPO, text=True,
                                  capture_output=True, timeout=120, check=False)
            assert lost.returncode == 1 and lost.stdout == "", (args, lost.stdout, lost.stderr)
            assert lost.stderr.startswith("error: the view's data is gone from Redis"), (args, lost.stderr)
            assert "kappa reprocess start" in lost.stderr and "docs/runbooks/redis-lost.md" in lost.stderr
        status = subprocess.run([*KAPPA, "reprocess", "status"], env=env, cwd=REPO, text=True,
                                capture_output=True, timeout=120, check=False)
        assert "Redis data is LOST" in status.stdout and "None" not in status.stdout, status.stdout
    finally:
        _drop(redis_client, s.redis_prefix)
