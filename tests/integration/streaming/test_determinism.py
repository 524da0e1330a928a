"""The same log gives the same views, however it is cut into batches, killed, moved or rebuilt.

One topic of 20,000 generated events (late, out-of-order, duplicate and malformed ones) is
processed (a) live in 1,000-record batches with three kill -9s of the driver and its JVM, its
driver moved between two hosts at each restart, (b) as one replay in 100,000-record batches, (c)
as a rebuild from the earliest offset after the Redis database was flushed. The three Redis
states are equal key by key (HyperLogLogs: the same count, and merged with each other they count
the same), and every ``late`` flag in the three ``rsvps.analyzed`` outputs agrees per source
position; the live views, output and batch metrics (no record counted twice) equal the
independent computation.

"host A" and "host B" are two working folders, each with its own ``var/`` (stack data and logs),
lake folder and temp folders (``TMPDIR``, ``SPARK_LOCAL_DIRS``) and its own ``KAPPA_HOSTNAME``;
they share only the checkpoint location (``lake.checkpoint_root``) and the stack (Kafka, Redis).
A driver started on B while A runs is refused naming A's host and pid; after each kill -9 the next
host starts once the dead driver's lease expired, and writes no checkpoint of its own.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from jobs.streaming.lease import lease_key
from tests.conftest import KAPPA, REPO
from tests.integration.streaming.conftest import produce
from tests.integration.streaming.expected import compute, metrics_batches, read_topic
from tests.integration.streaming.test_end_to_end import check_kafka, check_metrics, check_redis, generate
from tests.integration.streaming.test_kill_restart import _env, _kill_group

EVENTS = 20_000
LIVE_PER_BATCH, REPLAY_PER_BATCH = 1_000, 100_000
KILL_AFTER_S = (0.2, 1.5, 4.0)
DB = 7  # a database of the session's Redis of this test's own, flushed as a lost Redis would be
BOOKKEEPING = ("batch_id", "query", "updated_ms")
LEASE_TTL_S = 6
HOSTS = ("host-a", "host-b", "host-a", "host-b")   # the live driver's host at each (re)start


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


def _run_args(mode: str, per_batch: int) -> list[str]:
    args = [*KAPPA, "stream", "run", "--mode", mode, "--max-offsets-per-trigger", str(per_batch)]
    return [*args, "--to", "latest", "--fresh"] if mode == "replay" else args


def _start(env: dict[str, str], args: list[str], log: Path, cwd: Path = REPO) -> subprocess.Popen:
    with log.open("a") as out:
        return subprocess.Popen(args, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _input_counted(client: redis.Redis, prefix: str) -> int:
    return int(client.hget(f"{prefix}:totals", "input") or 0)


def _reported(client: redis.Redis, prefix: str) -> int:
    return sum(client.llen(key) for key in client.scan_iter(f"{prefix}:metrics:*:history"))


def _refused_while_running(env: dict[str, str], folder: Path, running: subprocess.Popen) -> None:
    """A second driver of the query, on another host, exits 3 naming the running one."""
    second = subprocess.run(_run_args("live", LIVE_PER_BATCH), env=env, cwd=folder, capture_output=True,
                            text=True, timeout=300, check=False)
    said = second.stdout + second.stderr
    assert second.returncode == 3, said
    assert f"already runs (host host-a, pid {running.pid}, since " in said, said
    assert "Traceback" not in said and "kappa stream stop" in said, said
    assert running.poll() is None, "the refused driver stopped the running one"


def _lease_expires(client: redis.Redis, key: str, host: str) -> None:
    """The killed driver's lease outlives it (nobody renews it) until its TTL ends."""
    assert host.encode() in (client.get(key) or b""), f"{host}'s lease should outlive it until it expires"
    deadline = time.monotonic() + LEASE_TTL_S + 10
    while client.exists(key):
        assert time.monotonic() < deadline, f"{host}'s lease did not expire"
        time.sleep(0.2)


def _live_with_kills(env: dict[str, str], client: redis.Redis, prefix: str, log: Path,
                     folders: dict[str, Path]) -> None:
    args = _run_args("live", LIVE_PER_BATCH)
    hosts = {name: _host_env(env, name, folder) for name, folder in folders.items()}
    key = lease_key(Path(env["KAPPA_LAKE__CHECKPOINT_ROOT"]) / env["KAPPA_STREAMING__QUERY_NAME"],
                    env["KAPPA_STREAMING__QUERY_NAME"])
    for at, (host, delay) in enumerate(zip(HOSTS, KILL_AFTER_S, strict=False)):
        proc = _start(hosts[host], args, log, folders[host])
        seen, deadline = _reported(client, prefix), time.monotonic() + 400
        while _reported(client, prefix) == seen:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        if at == 0:
            _refused_while_running(hosts["host-b"], folders["host-b"], proc)
        time.sleep(delay)
        _kill_group(proc)
        _lease_expires(client, key, host)
    assert _input_counted(client, prefix) < EVENTS, "the live job finished before the last kill"
    last = HOSTS[len(KILL_AFTER_S)]
    proc = _start(hosts[last], args, log, folders[last])
    deadline = time.monotonic() + 600
    while _input_counted(client, prefix) < EVENTS:
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)  # the driver alone: it stops after the batch, its JVM with it
    assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    for folder in folders.values():
        assert not list(folder.glob("**/checkpoints")), f"{folder.name} wrote a checkpoint of its own"


def _snapshot(client: redis.Redis, prefix: str) -> dict[str, Any]:
    """Every key of the view under ``prefix`` (without it), by type; the job's metrics left out."""
    state: dict[str, Any] = {}
    for raw in client.scan_iter(f"{prefix}:*"):
        key = raw.decode().removeprefix(f"{prefix}:")
        if key.startswith("metrics:"):
            continue
        kind = client.type(raw).decode()
        if kind == "hash":
            value: Any = {k.decode(): v.decode() for k, v in client.hgetall(raw).items()}
            if key.startswith("fence:"):
                value = {k: v for k, v in value.items() if k not in BOOKKEEPING}
        elif kind == "zset":
            value = {m.decode(): s for m, s in client.zrange(raw, 0, -1, withscores=True)}
        elif kind == "string":  # HyperLogLog: compared by count and merge below
            value = ("hll", client.get(raw))
        else:
            value = (kind, None)
        state[key] = value
    return state


def _assert_same_view(client: redis.Redis, left: dict[str, Any], right: dict[str, Any], name: str) -> None:
    assert sorted(left) == sorted(right), (
        f"{name}: keys only on the left {sorted(set(left) - set(right))[:10]}, only on the right "
        f"{sorted(set(right) - set(left))[:10]}")
    differ = [key for key in left if left[key] != right[key] and not isinstance(left[key], tuple)]
    examples = [(k, left[k], right[k]) for k in differ[:3]]
    assert not differ, f"{name}: {len(differ)} keys differ, e.g. {examples}"
    for key, value in left.items():
        if isinstance(value, tuple) and value[0] == "hll":
            client.set("cmp:left", value[1])
            client.set("cmp:right", right[key][1])
            count = client.pfcount("cmp:left")
            assert count == client.pfcount("cmp:right"), f"{name}: HyperLogLog {key}"
            client.delete("cmp:merged")  # PFMERGE merges into what the destination holds
            client.pfmerge("cmp:merged", "cmp:left", "cmp:right")
            assert client.pfcount("cmp:merged") == count, f"{name}: HyperLogLog {key} merged"
    client.delete("cmp:left", "cmp:right", "cmp:merged")


def _late_flags(kafka_props: dict[str, str], topic: str) -> dict[tuple[int, int], bool]:
    flags: dict[tuple[int, int], bool] = {}
    for message in read_topic(kafka_props, topic, 3):
        record = json.loads(message.value())
        position = (record["source_partition"], record["source_offset"])
        assert flags.setdefault(position, record["late"]) == record["late"], f"{topic}: copies of {position}"
    return flags


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_live_with_kills_a_replay_and_a_rebuild_give_the_same_views(
        stream_cfg, kappa_env, kafka_props, topic_factory, tmp_path) -> None:
    sent = generate(EVENTS, seed=31)
    produce(stream_cfg, stream_cfg.streaming.source_topic, (s.line for s in sent))
    client = redis.Redis(host=stream_cfg.redis.host, port=stream_cfg.redis.port, db=DB)
    client.flushdb()
    base = {**_env(stream_cfg, kappa_env), "KAPPA_REDIS__DB": str(DB)}
    runs = {name: {**base, "KAPPA_STREAMING__REDIS_PREFIX": prefix,
                   "KAPPA_STREAMING__ANALYZED_TOPIC": topic_factory(3, f"analyzed-{name}"),
                   "KAPPA_STREAMING__QUERY_NAME": f"{stream_cfg.streaming.query_name}-{name}"}
            for name, prefix in (("live", "a"), ("replay", "b"), ("rebuild", "a"))}
    log = tmp_path / "stream.log"

    _live_with_kills(runs["live"], client, "a", log,
                     {host: tmp_path / host for host in ("host-a", "host-b")})
    live = _snapshot(client, "a")
    expected = compute(sent)
    live_cfg = stream_cfg.model_copy(update={"streaming": stream_cfg.streaming.model_copy(update={
        "redis_prefix": "a", "analyzed_topic": runs["live"]["KAPPA_STREAMING__ANALYZED_TOPIC"]})})
    check_redis(live_cfg, client, expected)
    check_kafka(live_cfg, kafka_props, expected, allow_duplicates=True)
    query = next(iter(client.scan_iter("a:metrics:*:history"))).decode().split(":")[2]
    check_metrics(metrics_batches(kafka_props, stream_cfg.streaming.metrics_topic, query), EVENTS)
    replay = _start(runs["replay"], _run_args("replay", REPLAY_PER_BATCH), log)
    assert replay.wait(timeout=600) == 0, log.read_text()[-3000:]
    replayed = _snapshot(client, "b")
    client.flushdb()  # Redis lost: the view is rebuilt from the earliest offset
    rebuild = _start(runs["rebuild"], _run_args("replay", REPLAY_PER_BATCH), log)
    assert rebuild.wait(timeout=600) == 0, log.read_text()[-3000:]
    rebuilt = _snapshot(client, "a")

    assert int(live["totals"]["late"]) == expected.totals["late"] > 0
    _assert_same_view(client, live, replayed, "live vs replay")
    _assert_same_view(client, live, rebuilt, "live vs rebuild")
    flags = {name: _late_flags(kafka_props, env["KAPPA_STREAMING__ANALYZED_TOPIC"])
             for name, env in runs.items()}
    assert flags["live"] == flags["replay"] == flags["rebuild"]
    assert sum(flags["live"].values()) == expected.totals["late"]
    assert set(flags["live"]) == expected.valid_positions
