"""No silent gaps: a replay into Redis that would start beyond the fence fails its pre-flight.

The sequence of an outside check: a replay of a later range into Redis before the live job had
read the topic moved the fence over the earlier records, which then were never counted. Now that
replay fails before Spark starts, naming the partition, the fence and the gap; a replay from the
earliest offset counts everything once, and the later range replayed after it counts nothing twice.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from jobs.streaming.job import RunSpec, run_stream
from tests.conftest import KAPPA, REPO
from tests.integration.streaming.conftest import produce
from tests.integration.streaming.test_end_to_end import generate
from tests.integration.streaming.test_kill_restart import _env

EVENTS = 3_000


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*KAPPA, "stream", "run", "--mode", "replay", "--sinks", "redis", *args],
                          env=env, cwd=REPO, text=True, capture_output=True, timeout=600, check=False)


@pytest.mark.slow
def test_a_later_range_first_fails_with_the_gap_named_and_nothing_is_skipped(
        stream_cfg, kappa_env, redis_client, spark) -> None:
    s = stream_cfg.streaming
    produce(stream_cfg, s.source_topic, (item.line for item in generate(EVENTS, seed=51)))
    env = _env(stream_cfg, kappa_env)
    later = json.dumps({s.source_topic: {"0": 600, "1": 600, "2": 600}})

    refused = _run(env, "--from", later, "--to", "latest")
    assert refused.returncode == 2, refused.stderr[-2000:]
    [line] = [row for row in refused.stderr.splitlines() if row.startswith("error:")]
    assert f"{s.source_topic}/0: no fence (nothing applied yet), the run starts at offset 600" in line
    assert "offsets 0-599 (600 records) would never be counted" in line
    # the remedies the runbooks give: replay from the fence, or a new view version
    assert "--from earliest" in line and "new view version with `kappa reprocess start`" in line, line
    assert "Traceback" not in refused.stderr
    assert not redis_client.exists(f"{s.redis_prefix}:fence:summaries")

    # the counting runs in this process, on the session's Spark (the refusal above is the CLI's)
    redis_only = frozenset({"redis"})
    run_stream(stream_cfg, RunSpec(mode="replay", query="whole", ending="latest", sinks=redis_only))
    totals = {k.decode(): int(v) for k, v in redis_client.hgetall(f"{s.redis_prefix}:totals").items()}
    assert totals["input"] == EVENTS

    from_600 = {s.source_topic: dict.fromkeys(range(3), 600)}
    run_stream(stream_cfg, RunSpec(mode="replay", query="later", starting=from_600, ending="latest",
                                   sinks=redis_only))
    after = {k.decode(): int(v) for k, v in redis_client.hgetall(f"{s.redis_prefix}:totals").items()}
    assert after == totals
