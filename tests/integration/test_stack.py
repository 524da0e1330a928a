"""The embedded stack: health, round trips, idempotent up, clean down, clear errors."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from jobs.config.load import load_config
from jobs.errors import StackError
from jobs.host.processes import port_busy
from jobs.stack.embedded import SNAPSHOT_THREAD, EmbeddedStack
from tests.conftest import free_port


def test_status_shows_both_services_healthy(run_kappa, stack):
    result = run_kappa("stack", "status", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["kafka"]["healthy"] and rows["redis"]["healthy"]
    assert rows["kafka"]["address"] == stack.kafka.bootstrap_servers
    assert rows["kafka"]["pid"] and rows["redis"]["pid"]


def test_up_twice_is_harmless(run_kappa, stack):
    before = {s.name: s.pid for s in EmbeddedStack(stack).status()}
    result = run_kappa("stack", "up")
    assert result.returncode == 0, result.stderr
    assert "already running" in result.stderr
    after = {s.name: s.pid for s in EmbeddedStack(stack).status()}
    assert after == before


def test_kafka_produce_consume_round_trip(kafka_props, topic_factory):
    topic = topic_factory(partitions=1)
    producer = Producer({**kafka_props, "enable.idempotence": True, "acks": "all"})
    for i in range(5):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
    assert producer.flush(10) == 0
    consumer = Consumer({**kafka_props, "group.id": uuid.uuid4().hex,
                         "receive.message.max.bytes": 1_000_000_000})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = []
    while len(seen) < 5:
        batch = consumer.consume(10, timeout=5)
        assert batch, f"no records after {seen}"
        seen += [(m.key(), m.value()) for m in batch if m.error() is None]
    consumer.close()
    assert seen == [(f"k{i}".encode(), f"v{i}".encode()) for i in range(5)]


def test_redis_ping(redis_client):
    assert redis_client.ping() is True


def _private_config(tmp_path, kafka_port=None, redis_port=None):
    return load_config("test", environ={}, overrides={
        "kafka.bootstrap_servers": f"127.0.0.1:{kafka_port or free_port()}",
        "redis.port": redis_port or free_port(),
        "stack.data_dir": str(tmp_path / "stack")})


def test_down_leaves_no_process_behind(tmp_path):
    stack = EmbeddedStack(_private_config(tmp_path))
    started = {s.name: s.pid for s in stack.up(progress=lambda m: None)}
    assert all(started.values())
    stack.down(progress=lambda m: None)
    for pid in started.values():
        assert not _running(pid), f"pid {pid} still runs after down"
    leftovers = [pid for pid in os.listdir("/proc") if pid.isdigit() and _mentions(pid, tmp_path)]
    assert leftovers == [], "a process of the stack survived down"
    assert not any(s.healthy for s in stack.status())
    assert (tmp_path / "stack" / "kafka").exists(), "down keeps data unless --wipe"


def _mentions(pid: str, path) -> bool:
    try:
        return str(path) in open(f"/proc/{pid}/cmdline").read() and _running(int(pid))
    except OSError:
        return False


def _running(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _wait_until(what: str, check, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached within {timeout_s}s")


def test_a_sigterm_to_the_broker_or_its_wrapper_leaves_no_orphan(tmp_path):
    """noida-db's Python wrapper exits on SIGTERM and leaves its native server serving.

    The pidfile names the server: a SIGTERM to it stops the broker. A SIGTERM to the wrapper
    leaves the server, which status shows (with its pid), ``up`` finds as already running and
    ``down`` stops.
    """
    config = _private_config(tmp_path)
    port = int(config.kafka.bootstrap_servers.rsplit(":", 1)[1])
    stack = EmbeddedStack(config)
    pidfile = tmp_path / "stack" / "kafka.pid"
    try:
        stack.up(progress=lambda m: None)
        named = int(pidfile.read_text())
        os.kill(named, signal.SIGTERM)               # what an operator does with the pidfile
        _wait_until("the broker's port is free", lambda: not port_busy(port))
        _wait_until("no process of the broker left", lambda: not _mentions_any(tmp_path / "stack" / "kafka"))

        stack.up(progress=lambda m: None)
        server = int(pidfile.read_text())
        wrapper = os.getpgid(server)                  # the group leader: noida-db's Python wrapper
        assert wrapper != server and "noida" in open(f"/proc/{wrapper}/cmdline").read()
        os.kill(wrapper, signal.SIGTERM)
        _wait_until("the wrapper gone", lambda: not _running(wrapper))
        kafka = {s.name: s for s in stack.status()}["kafka"]
        assert kafka.healthy and kafka.pid == server, kafka
        said: list[str] = []
        stack.up(progress=said.append)              # its own server is no "other process"
        assert f"kafka: already running (pid {server})" in said, said
    finally:
        stack.down(progress=lambda m: None)
    assert not port_busy(port), "down left the broker serving"
    assert not _mentions_any(tmp_path), "a process of the stack survived down"


def _mentions_any(path) -> bool:
    return any(_mentions(pid, path) for pid in os.listdir("/proc") if pid.isdigit())


def test_busy_port_is_one_clear_error(tmp_path, run_kappa):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(StackError, match=f"port {port} for kafka is already in use"):
            EmbeddedStack(_private_config(tmp_path, kafka_port=port)).up(progress=lambda m: None)
        result = run_kappa("stack", "up", env={
            "KAPPA_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{port}",
            "KAPPA_STACK__DATA_DIR": str(tmp_path / "cli")})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: port")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("service", ["kafka", "redis"])
def test_missing_binary_is_one_clear_error(tmp_path, run_kappa, service):
    missing = tmp_path / "nowhere" / "server"
    env = {f"KAPPA_STACK__{service.upper()}_BINARY": str(missing),
           "KAPPA_STACK__DATA_DIR": str(tmp_path / "s"),
           "KAPPA_KAFKA__BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
           "KAPPA_REDIS__PORT": str(free_port())}
    result = run_kappa("stack", "up", env=env)
    assert result.returncode == 1, result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and f"{missing} not found" in last
    assert "Traceback" not in result.stderr
    EmbeddedStack(load_config("test", environ=env)).down(progress=lambda m: None)


def test_external_services_are_checked_not_started(run_kappa, stack, tmp_path):
    env = {"KAPPA_KAFKA__EMBEDDED": "false", "KAPPA_REDIS__EMBEDDED": "false",
           "KAPPA_STACK__DATA_DIR": str(tmp_path / "ext")}
    up = run_kappa("stack", "up", env=env)
    assert up.returncode == 0, up.stderr
    assert "kafka: external at" in up.stderr and "not started" in up.stderr
    assert not (tmp_path / "ext" / "kafka.pid").exists()
    status = run_kappa("stack", "status", "--json", env=env)
    rows = {row["name"]: row for row in json.loads(status.stdout)}
    assert rows["kafka"]["managed"] is False and rows["kafka"]["healthy"] is True
    assert rows["redis"]["managed"] is False and rows["redis"]["healthy"] is True


def test_a_failed_up_leaves_nothing_running(tmp_path):
    """Kafka starts, Redis cannot (its port is taken): up fails and stops the Kafka it started."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        config = _private_config(tmp_path, redis_port=squatter.getsockname()[1])
        with pytest.raises(StackError, match="for redis is already in use"):
            EmbeddedStack(config).up(progress=lambda m: None)
    leftovers = [pid for pid in os.listdir("/proc") if pid.isdigit() and _mentions(pid, tmp_path)]
    assert leftovers == [], "kafka was left running after a failed up"
    assert not (tmp_path / "stack" / "kafka.pid").exists()


def _threads(pgid: int) -> dict[int, tuple[str, int]]:
    """Name and nice of every thread of every process in the process group, read from /proc."""
    found = {}
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            if int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            for tid in os.listdir(f"/proc/{pid}/task"):
                # field 19 of stat (index 16 after the command) is the nice value
                stat = open(f"/proc/{pid}/task/{tid}/stat").read()
                name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
                found[int(tid)] = (name, int(stat.rsplit(")", 1)[1].split()[16]))
        except (OSError, IndexError):
            continue
    return found


@pytest.mark.parametrize(("kafka_nice", "snapshot_nice"), [(0, 19), (10, 10), (0, 0)])
def test_broker_yields_the_cpu_in_the_callers_session(tmp_path, kafka_nice, snapshot_nice):
    """The broker's state snapshot must not take a core from the pipeline (docs/benchmarks.md).

    The broker's state-rewrite thread runs at ``stack.kafka_snapshot_nice``, its other threads at
    ``stack.kafka_nice``, Redis at the caller's nice, and both in the caller's session: with
    autogroup scheduling, a session of its own would get an equal share of the CPU whatever its
    threads' nice.
    """
    config = load_config("test", environ={}, overrides={
        "kafka.bootstrap_servers": f"127.0.0.1:{free_port()}", "redis.port": free_port(),
        "stack.data_dir": str(tmp_path / "stack"), "stack.kafka_nice": kafka_nice,
        "stack.kafka_snapshot_nice": snapshot_nice})
    stack = EmbeddedStack(config)
    pids = {s.name: s.pid for s in stack.up(progress=lambda m: None)}
    groups = {name: os.getpgid(pid) for name, pid in pids.items()}
    try:
        broker = _threads(groups["kafka"])
        assert len(broker) >= 3, f"the broker's threads were not found: {broker}"  # wrapper + server
        own = os.getpriority(os.PRIO_PROCESS, 0)
        snapshot = [nice for name, nice in broker.values() if name == SNAPSHOT_THREAD]
        assert snapshot == [max(snapshot_nice, own)], f"thread {SNAPSHOT_THREAD!r}: {broker}"
        assert {nice for name, nice in broker.values() if name != SNAPSHOT_THREAD} == {max(kafka_nice, own)}
        assert {nice for _, nice in _threads(groups["redis"]).values()} == {own}
        for name, pid in pids.items():
            assert groups[name] != os.getpgid(0), "each service has its own process group (stop_group)"
            assert os.getsid(pid) == os.getsid(0), "a service must not start a session of its own"
    finally:
        stack.down(progress=lambda m: None)
